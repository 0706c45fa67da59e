"""SmartNoise SQL metadata -> dpsql catalogue, so SmartNoise users can move over.

SmartNoise SQL describes data as ``Collection: {Schema: {Table: {table options, <column>:
{type, private_id, lower, upper, ...}}}}`` (https://docs.smartnoise.org/sql/metadata.html),
with an optional top-level ``engine`` key. This module reads that format into dpsql's
metadata dict (see ``docs/python-api.md``) and warns, one :class:`SmartNoiseImportWarning`
per item, about what SmartNoise declares that dpsql cannot carry over. The ``command`` at the
bottom is the ``dpsql import-smartnoise IN.yaml OUT.yaml`` CLI command.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import click
import yaml

from dpsql.catalog import load_catalog
from dpsql.cli_params import ExistingFile
from dpsql.errors import CatalogError
from dpsql.errors import Warning as DpsqlWarning

# SmartNoise column type -> dpsql column type
COLUMN_TYPES = {"int": "int", "float": "float", "string": "text", "boolean": "bool",
                "datetime": "timestamp"}
# Table-level SmartNoise options; every other key of a table is a column.
TABLE_OPTIONS = ("rows", "rows_exact", "row_privacy", "max_ids", "sample_max_ids", "clamp_counts",
                 "clamp_columns", "use_dpsu", "censor_dims")


class SmartNoiseImportWarning(DpsqlWarning):
    """Something in the SmartNoise metadata has no dpsql equivalent and was not carried over."""

    __module__ = "dpsql"


def from_smartnoise(source: str | os.PathLike | dict) -> dict:
    """Convert SmartNoise SQL metadata (a YAML path or the parsed dict) to dpsql metadata.

    Mapping, table by table:

    - the column with ``private_id: true`` becomes ``privacy_unit``; ``row_privacy: true``
      becomes ``privacy_unit: null`` (one row per person); a table with neither becomes a
      public table (``public: true``, a dimension table without personal data), with a
      warning that says so.
    - ``max_ids`` (SmartNoise keeps at most that many rows per person in the whole table)
      becomes ``max_rows_per_unit`` (R), and also ``max_groups_per_unit`` (L0) and
      ``max_rows_per_group`` (L∞): a person with max_ids rows may spread them over max_ids
      groups or put them all in one, so no row SmartNoise would keep is dropped, and the
      sensitivities use min(L0·L∞, R) = max_ids rows, SmartNoise's own bound.
    - ``lower``/``upper`` are kept; types map int/float/string/boolean/datetime to
      int/float/text/bool/timestamp.
    - The catalogue is named after the collection (after the file's stem when the collection
      has no name), tables ``schema.table`` as SmartNoise queries write them (``FROM
      PUMS.PUMS``; dpsql resolves a qualified name to the catalogue entry of that name, and
      reads it from that schema of the attached database), with ``neighbouring:
      add_remove`` (SmartNoise's relation) and no ``source``.

    Not carried over, each with a warning: public domains (SmartNoise has none, so a text
    column needs ``values`` added by the owner before GROUP BY on it works, and
    ``censor_dims: false`` does not make keys public), a privacy budget, ``sensitivity``
    overrides (dpsql derives sensitivity from the bounds), ``missing_value`` of the privacy
    unit, ``clamp_counts``, ``use_dpsu`` and ``rows_exact``. ``clamp_columns: false`` and
    ``sample_max_ids: false`` are ignored because dpsql always clamps and bounds.

    Raises:
        CatalogError: the input is not SmartNoise metadata dpsql can represent; the
            message names the table and column.

    Example:
        >>> meta = {"PUMS": {"PUMS": {"PUMS": {"max_ids": 1, "row_privacy": True,
        ...     "age": {"type": "int", "lower": 0, "upper": 100}}}}}
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # the missing budget is warned about
        ...     converted = from_smartnoise(meta)
        >>> converted["tables"]["PUMS.PUMS"]["columns"]["age"]
        {'type': 'int', 'lower': 0, 'upper': 100}
    """
    raw = _read(source)
    collection, schemas = _collection(raw)
    title = _catalogue_name(collection, source)
    tables: dict[str, dict] = {}
    origin: dict[str, str] = {}
    for schema, schema_tables in schemas.items():
        if not isinstance(schema_tables, dict):
            raise CatalogError(f"schema {schema!r}: expected a mapping of table names to tables")
        for name, table in schema_tables.items():
            qualified = f"{schema}.{name}"
            if qualified.lower() in origin:
                raise CatalogError(
                    f"tables {origin[qualified.lower()]!r} and {qualified!r} have the same name",
                    hint="SQL names are case-insensitive: rename one of them")
            origin[qualified.lower()] = qualified
            tables[qualified] = _table(qualified, table)
    _warn(f"collection {title!r} declares no privacy budget (SmartNoise sets it in code): "
          "add budget: {epsilon: ..., delta: ...}; dpsql releases nothing without one")
    metadata = {
        "name": title,
        "description": f"imported from SmartNoise SQL metadata (collection {title!r})",
        "neighbouring": "add_remove",
        "tables": tables,
    }
    load_catalog(metadata)  # refuse now, not at the first query, if dpsql cannot use it
    return metadata


def _read(source: str | os.PathLike | dict) -> dict:
    if isinstance(source, dict):
        return source
    path = Path(source)
    if not path.is_file():
        raise CatalogError(f"SmartNoise metadata file {str(path)!r} does not exist",
                           hint="pass the path of the SmartNoise YAML file")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise CatalogError(f"SmartNoise metadata file {str(path)!r} is not valid YAML: {err}"
                           ) from err
    if not isinstance(raw, dict):
        raise CatalogError(f"SmartNoise metadata file {str(path)!r} must hold a mapping")
    return raw


def _catalogue_name(collection: Any, source: str | os.PathLike | dict) -> str:
    """The collection's name; for a collection without one (``""`` or ``null``), the stem of
    the file it came from (``dataset`` for a dict)."""
    if collection is not None and str(collection).strip():
        return str(collection)
    if isinstance(source, dict):
        return "dataset"
    return Path(source).stem


def _collection(raw: dict) -> tuple[str, dict]:
    names = [key for key in raw if key != "engine"]
    if len(names) != 1:
        raise CatalogError(
            f"SmartNoise metadata must hold exactly one collection, found {names}",
            hint="the layout is Collection: {Schema: {Table: {...}}}, plus an optional engine")
    schemas = raw[names[0]]
    if not isinstance(schemas, dict) or not schemas:
        raise CatalogError(f"collection {names[0]!r}: expected a mapping of schemas to tables")
    return names[0], schemas


def _table(qualified: str, raw: Any) -> dict:
    if not isinstance(raw, dict):
        raise CatalogError(f"table {qualified!r}: expected a mapping of options and columns")
    columns: dict[str, dict] = {}
    units: list[str] = []
    public = not raw.get("row_privacy", False) and not any(
        isinstance(spec, dict) and spec.get("private_id") for name, spec in raw.items()
        if name not in TABLE_OPTIONS)
    for name, spec in raw.items():
        if name in TABLE_OPTIONS:
            continue
        column, is_unit = _column(qualified, str(name), spec, public=public)
        columns[str(name)] = column
        if is_unit:
            units.append(str(name))
    table: dict[str, Any] = {}
    if "rows" in raw:
        table["rows"] = raw["rows"]
    if public:
        _warn(f"table {qualified!r} has no private_id column and row_privacy is false, so it is "
              "imported as a public table: its rows are read and shown exactly. If it holds "
              "personal data, mark its person column 'privacy_unit: <column>' (or "
              "'privacy_unit: null' for one row per person) and remove 'public: true'")
        return {**table, "public": True, "columns": columns}
    table.update(_privacy_unit(qualified, raw, units))
    _warn_table_options(qualified, raw)
    table["columns"] = columns
    return table


def _privacy_unit(qualified: str, raw: dict, units: list[str]) -> dict:
    if raw.get("row_privacy", False):
        if units:
            _warn(f"table {qualified!r} has row_privacy: true, so its private_id column "
                  f"{units[0]!r} is not used as the privacy unit (as in SmartNoise)")
        return {"privacy_unit": None}
    if len(units) != 1:
        raise CatalogError(
            f"table {qualified!r}: columns {units} with private_id: true",
            hint="mark exactly one column 'private_id: true' (dpsql has one privacy unit per "
            "table), or set 'row_privacy: true' when each row is a different person")
    max_ids = raw.get("max_ids", 1)
    if isinstance(max_ids, bool) or not isinstance(max_ids, int) or max_ids < 1:
        raise CatalogError(f"table {qualified!r}: max_ids must be a whole number ≥ 1, "
                           f"got {max_ids!r}")
    return {"privacy_unit": units[0], "max_groups_per_unit": max_ids,
            "max_rows_per_group": max_ids, "max_rows_per_unit": max_ids}


def _warn_table_options(qualified: str, raw: dict) -> None:
    dropped = {
        "rows_exact": "the exact row count is not metadata dpsql uses",
        "clamp_counts": "dpsql releases counts as noised (clamp them in HAVING or afterwards "
                        "if needed)",
        "use_dpsu": "dpsql selects private keys with its own τ threshold",
    }
    for option, reason in dropped.items():
        if raw.get(option):
            _warn(f"table {qualified!r}: {option} is not carried over: {reason}")
    if raw.get("censor_dims") is False:
        _warn(f"table {qualified!r} has censor_dims: false, which lets SmartNoise release "
              "GROUP BY keys read from the data; dpsql only does that for keys with declared "
              "values (or with δ > 0 and a noisy threshold): add values: [...] to key columns")


def _column(qualified: str, name: str, raw: Any, *, public: bool) -> tuple[dict, bool]:
    where = f"table {qualified!r}, column {name!r}"
    if not isinstance(raw, dict) or "type" not in raw:
        raise CatalogError(f"{where}: expected a mapping with a type such as {{type: int}}")
    sn_type = raw["type"]
    if sn_type not in COLUMN_TYPES:
        raise CatalogError(f"{where}: SmartNoise type must be one of {sorted(COLUMN_TYPES)}, "
                           f"got {sn_type!r}")
    column: dict[str, Any] = {"type": COLUMN_TYPES[sn_type]}
    has_lower, has_upper = "lower" in raw, "upper" in raw
    if has_lower != has_upper:
        raise CatalogError(f"{where}: declares only one of lower and upper",
                           hint="declare both bounds, or neither")
    if has_lower:
        if sn_type not in ("int", "float"):
            raise CatalogError(f"{where}: bounds on a {sn_type} column",
                               hint="bounds are only for int and float columns")
        cast = int if sn_type == "int" else float
        column["lower"], column["upper"] = cast(raw["lower"]), cast(raw["upper"])
    is_unit = bool(raw.get("private_id", False))
    if sn_type == "string" and not is_unit and not public:  # a public table is its own domain
        _warn(f"{where} is text and SmartNoise declares no public domain for it: add "
              "values: [...] before GROUP BY on it works without δ")
    if "sensitivity" in raw:
        # only numeric columns take bounds: any other is counted, never summed
        advice = "" if has_lower else ", so declare them" if sn_type in ("int", "float") else \
            f" of numeric columns; a {sn_type} column takes none (it is only counted)"
        _warn(f"{where}: sensitivity {raw['sensitivity']!r} is not carried over; dpsql derives "
              f"the sensitivity from lower/upper{advice}")
    missing = raw.get("missing_value")
    if missing is not None and is_unit:
        _warn(f"{where}: missing_value is not carried over: rows without a person are left "
              "out of every answer")
    elif missing is not None:  # SmartNoise reads NULL as it; dpsql checks it on load
        column["missing_value"] = cast(missing) if has_lower else missing
    return column, is_unit


def _warn(message: str) -> None:
    warnings.warn(message, SmartNoiseImportWarning, stacklevel=2)


@click.command("import-smartnoise")
@click.argument("source", type=ExistingFile(
    "SmartNoise metadata file", "pass the path of a SmartNoise SQL metadata YAML as SOURCE"))
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
def command(source: str, output: str, force: bool) -> None:
    """Convert the SmartNoise SQL metadata SOURCE into the dpsql catalogue OUTPUT (YAML).

    What cannot be carried over is listed on stderr; review OUTPUT before use (add values:
    for text keys and a budget).
    """
    target = Path(output)
    if target.exists() and not force:
        raise click.ClickException(f"{output} exists; pass --force to overwrite it")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SmartNoiseImportWarning)
        metadata = from_smartnoise(source)  # a CatalogError reaches the dpsql CLI's handler
    target.write_text(yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True))
    for item in caught:
        click.echo(f"warning: {item.message}", err=True)
    tables = ", ".join(metadata["tables"])
    click.echo(f"wrote {output}: catalogue {metadata['name']!r} with table(s) {tables}; "
               f"{len(caught)} warning(s)")
