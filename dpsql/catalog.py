"""The metadata catalogue: which tables are private, who the person is, bounds and domains.

Loaded from YAML or a dict, validated once, and frozen. Every error names the table and
column at fault. Nothing here reads the data: bounds and domains are the data owner's
declaration, never derived from the rows.
"""

from __future__ import annotations

import datetime
import math
import os
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from dpsql.budget import PrivacyLoss, positive, probability, rho_from_epsilon_delta
from dpsql.errors import BoundsDefaultWarning, CatalogError

COLUMN_TYPES = ("int", "float", "text", "bool", "date", "timestamp")
# SQL's names for them, which a metadata file copied from a schema writes
_TYPE_NAMES = {
    **dict.fromkeys(("integer", "bigint", "smallint", "tinyint", "hugeint", "int4", "int8",
                     "long"), "int"),
    **dict.fromkeys(("double", "double precision", "numeric", "decimal", "real", "float8",
                     "float4", "number"), "float"),
    **dict.fromkeys(("varchar", "string", "char", "character varying", "str"), "text"),
    "boolean": "bool", "datetime": "timestamp", "timestamptz": "timestamp",
}
TEMPORAL = ("date", "timestamp")
NEIGHBOURING = ("add_remove", "replace")
MECHANISMS = ("laplace", "gaussian")
PROJECT_ROOT = Path(__file__).resolve().parents[1]
_ENV_PATTERN = re.compile(r"\$\{(\w+)\}")
# what the embedded DuckDB may use: memory before it spills, where and how much it spills
RESOURCE_KEYS = ("memory_limit", "temp_directory", "max_temp_size")
_SIZE = re.compile(r"\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)
# how a CSV source is read (backends/duckdb.py) and the encodings DuckDB's reader knows
CSV_KEYS = ("delimiter", "header", "names", "null", "trim", "encoding")
ENCODINGS = ("utf-8", "utf-16", "latin-1")


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One declared column: its type, optional [lower, upper] bounds and public domain, and
    the value its NULLs are read as (``missing_value``; None: NULLs stay NULL)."""

    name: str
    type: str
    lower: float | None = None
    upper: float | None = None
    values: tuple | None = None
    missing_value: Any = None

    @property
    def is_bounded(self) -> bool:
        """True when both bounds are declared."""
        return self.lower is not None and self.upper is not None

    @property
    def is_numeric(self) -> bool:
        """True for int and float columns."""
        return self.type in ("int", "float")

    @property
    def categories(self) -> tuple | None:
        """The values the column can take, when they are public: its declared ``values``, or
        (False, True) for a bool (None otherwise)."""
        if self.values is not None:
            return self.values
        return (False, True) if self.type == "bool" else None


@dataclass(frozen=True, slots=True)
class KeyBounds:
    """The contribution bounds of a GROUP BY whose keys are exactly ``columns`` of the table
    (``key_bounds``): they replace the table's L0 and L∞ for such a statement."""

    columns: tuple[str, ...]
    max_groups_per_unit: int
    max_rows_per_group: int


@dataclass(frozen=True, slots=True)
class TableSpec:
    """One declared table: public, or private with a privacy unit (None = row privacy)."""

    name: str
    columns: dict[str, ColumnSpec]
    public: bool = False
    privacy_unit: str | None = None
    max_groups_per_unit: int = 1
    max_rows_per_group: int = 1
    max_rows_per_unit: int | None = None  # rows one person may add in all, over all groups
    key_bounds: tuple[KeyBounds, ...] = ()  # L0 and L∞ of a GROUP BY on some columns
    source: str | None = None
    csv: dict[str, Any] = field(default_factory=dict)

    @property
    def is_row_privacy(self) -> bool:
        """True when each row is a distinct person."""
        return not self.public and self.privacy_unit is None

    def column(self, name: str) -> ColumnSpec | None:
        """The column called ``name`` (case-insensitive, as SQL identifiers are)."""
        return _by_name(self.columns, name)

    def missing_columns(self, names: Iterable[str]) -> list[str]:
        """The declared columns that ``names`` (a source's columns) lacks, case-insensitively.

        Example:
            >>> TableSpec("t", {"uid": ColumnSpec("uid", "int")}).missing_columns(["UID"])
            []
        """
        found = {str(n).lower() for n in names}
        return [c for c in self.columns if c.lower() not in found]


@dataclass(frozen=True, slots=True)
class Catalog:
    """The validated metadata of one dataset."""

    name: str
    tables: dict[str, TableSpec]
    neighbouring: str = "add_remove"
    budget: PrivacyLoss | None = None
    mechanism: str = "laplace"
    path: Path | None = None
    dialect: str = "duckdb"  # the SQL dialect analysts write (sqlglot's dialect names)
    names_dialect: bool = False  # the metadata says ``dialect:`` (else DuckDB's by default)
    resources: dict[str, str] = field(default_factory=dict)  # RESOURCE_KEYS -> value

    def table(self, name: str) -> TableSpec | None:
        """The table called ``name`` (case-insensitive)."""
        return _by_name(self.tables, name)


def _by_name(specs: dict, name: str):
    """The entry called ``name``, matched case-insensitively like SQL identifiers."""
    found = specs.get(name)
    if found is not None:
        return found
    return next((spec for key, spec in specs.items() if key.lower() == name.lower()), None)


def datasets_dir() -> Path:
    """Folder of the shared real data sets: ``$DPSQL_DATASETS`` or ``../shared/datasets``."""
    env = os.environ.get("DPSQL_DATASETS")
    if env:
        return Path(env)
    return (PROJECT_ROOT / ".." / "shared" / "datasets").resolve()


def load_catalog(metadata: str | os.PathLike | dict | Catalog) -> Catalog:
    """Load and validate a catalogue from a YAML path, a dict, or pass a Catalog through.

    Raises:
        CatalogError: the metadata is invalid; the message names the table and column.

    Example:
        >>> cat = load_catalog({"tables": {"t": {"privacy_unit": None,
        ...     "columns": {"x": {"type": "int", "lower": 0, "upper": 9}}}}})
        >>> cat.table("T").column("X").upper
        9
    """
    if isinstance(metadata, Catalog):
        return metadata
    if isinstance(metadata, dict):
        return _build(metadata, base=Path.cwd(), path=None, default_name="dataset")
    path = Path(metadata)
    if not path.is_file():
        raise CatalogError(
            f"metadata file {str(path)!r} does not exist",
            hint="pass --metadata with the path of a YAML catalogue",
        )
    try:
        raw = yaml.load(path.read_text(), Loader=_StrictLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as err:
        raise CatalogError(f"metadata file {str(path)!r} is not valid YAML: {err}") from err
    if not isinstance(raw, dict):
        raise CatalogError(f"metadata file {str(path)!r} must hold a mapping with 'tables'")
    return _build(raw, base=path.resolve().parent, path=path.resolve(), default_name=path.stem)


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML's safe loader (libyaml's parser where PyYAML has it, several times faster than the
    pure-Python one), except that a repeated key is an error, not a silent overwrite."""


def _mapping_without_repeats(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {key!r} appears twice", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                              _mapping_without_repeats)


def _build(raw: dict, *, base: Path, path: Path | None, default_name: str) -> Catalog:
    unknown = set(raw) - {"name", "neighbouring", "budget", "tables", "mechanism", "description",
                          "dialect", "resources"}
    if unknown:
        raise CatalogError(
            f"unknown metadata key(s) {sorted(unknown)}",
            hint="top-level keys are name, neighbouring, budget, mechanism, dialect, "
            "resources and tables",
        )
    neighbouring = raw.get("neighbouring", "add_remove")
    if neighbouring not in NEIGHBOURING:
        raise CatalogError(
            f"neighbouring must be one of {NEIGHBOURING}, got {neighbouring!r}",
            hint="use add_remove (one person added or removed) or replace",
        )
    mechanism = raw.get("mechanism", "laplace")
    if mechanism not in MECHANISMS:
        raise CatalogError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    tables_raw = raw.get("tables")
    if not isinstance(tables_raw, dict) or not tables_raw:
        raise CatalogError("metadata has no 'tables' mapping", hint="declare at least one table")
    seen: set[str] = set()
    tables = {}
    for name, spec in tables_raw.items():
        if str(name).lower() in seen:
            raise CatalogError(f"table {name!r} is declared twice (names are case-insensitive)")
        seen.add(str(name).lower())
        tables[str(name)] = _table(str(name), spec, base)
    return Catalog(
        name=str(raw.get("name", default_name)),
        tables=tables,
        neighbouring=neighbouring,
        budget=_budget(raw.get("budget"), mechanism),
        mechanism=mechanism,
        path=path,
        dialect=str(raw.get("dialect", "duckdb")).lower(),
        names_dialect="dialect" in raw,
        resources=resources(raw.get("resources") or {}, base),
    )


def resources(raw: Any, base: Path) -> dict[str, str]:
    """Validated DuckDB resource settings: ``memory_limit`` and ``max_temp_size`` are sizes
    such as ``4GB``; ``temp_directory`` is a folder (relative to ``base``) to spill into.

    Example:
        >>> resources({"memory_limit": "2GB"}, Path("."))
        {'memory_limit': '2GB'}
    """
    if not isinstance(raw, dict):
        raise CatalogError("resources must be a mapping", hint="e.g. resources: "
                           "{memory_limit: 4GB, temp_directory: /var/tmp/dpsql}")
    unknown = set(raw) - set(RESOURCE_KEYS)
    if unknown:
        raise CatalogError(f"unknown resources key(s) {sorted(unknown)}",
                           hint=f"resources keys are {', '.join(RESOURCE_KEYS)}")
    out = {}
    for key, value in raw.items():
        if value is None:
            continue
        value = str(value).strip()
        if key == "temp_directory":
            out[key] = str(base / _expand(value, "resources: temp_directory"))
        elif _SIZE.fullmatch(value):
            out[key] = value
        else:
            raise CatalogError(f"resources: {key} must be a size such as 4GB, got {value!r}",
                               hint="write a number and a unit: B, KB, MB, GB, TB (or KiB ...)")
    return out


def _budget(raw: Any, mechanism: str) -> PrivacyLoss | None:
    """The dataset's budget, in ε and δ (Laplace) or in ρ (Gaussian, zCDP)."""
    if raw is None:
        return None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raw = {"epsilon": raw}
    if not isinstance(raw, dict):
        raise CatalogError("budget must be a mapping such as {epsilon: 10.0, delta: 1.0e-6} "
                           "or, with mechanism: gaussian, {rho: 1.0}")
    unknown = set(raw) - {"epsilon", "delta", "rho"}
    if unknown:  # a misspelt delta would leave δ at 0, a misspelt epsilon no budget at all
        raise CatalogError(f"unknown budget key(s) {sorted(unknown, key=str)}",
                           hint="budget keys are epsilon, delta and rho")
    if not {"epsilon", "rho"} & set(raw):
        raise CatalogError("budget gives neither epsilon nor rho",
                           hint="write e.g. {epsilon: 10.0, delta: 1.0e-6} or, with "
                           "mechanism: gaussian, {rho: 1.0}")
    try:
        if mechanism == "gaussian":
            if "rho" in raw:
                return PrivacyLoss(Fraction(0), rho=positive(raw["rho"], "budget rho"))
            return PrivacyLoss(Fraction(0), rho=rho_from_epsilon_delta(
                positive(raw["epsilon"], "budget epsilon"),
                probability(raw.get("delta", 0), "budget delta")))
        if "rho" in raw:
            raise CatalogError("a budget in ρ needs 'mechanism: gaussian'")
        return PrivacyLoss(positive(raw["epsilon"], "budget epsilon"),
                           probability(raw.get("delta", 0), "budget delta"))
    except CatalogError:
        raise
    except Exception as err:
        raise CatalogError(f"invalid budget: {err}") from err


def _table(name: str, raw: Any, base: Path) -> TableSpec:
    if not isinstance(raw, dict):
        raise CatalogError(f"table {name!r}: expected a mapping, got {type(raw).__name__}")
    allowed = {"source", "public", "privacy_unit", "max_groups_per_unit", "max_rows_per_group",
               "max_rows_per_unit", "key_bounds",
               "columns", "csv", "description", "rows"}
    unknown = set(raw) - allowed
    if unknown:
        raise CatalogError(f"table {name!r}: unknown key(s) {sorted(unknown)}",
                           hint=f"allowed keys are {sorted(allowed)}")
    public = raw.get("public", False)
    if not isinstance(public, bool):
        raise CatalogError(f"table {name!r}: public must be true or false")
    if not public and "privacy_unit" not in raw:
        raise CatalogError(
            f"table {name!r} is neither public nor private",
            hint="add 'privacy_unit: <column>' (or 'privacy_unit: null' for one row per "
            "person), or 'public: true' for a table without personal data",
        )
    if public and raw.get("privacy_unit") is not None:
        raise CatalogError(f"table {name!r} is public but names a privacy_unit; choose one")
    columns_raw = raw.get("columns") or {}
    if not isinstance(columns_raw, dict):
        raise CatalogError(f"table {name!r}: columns must be a mapping of name to spec")
    columns: dict[str, ColumnSpec] = {}
    for col_name, col_raw in columns_raw.items():
        if str(col_name).lower() in {c.lower() for c in columns}:
            raise CatalogError(f"table {name!r}: column {col_name!r} is declared twice")
        columns[str(col_name)] = _column(name, str(col_name), col_raw)
    unit = raw.get("privacy_unit")
    if unit is not None:
        unit = str(unit)
        if unit.lower() not in {c.lower() for c in columns}:
            columns[unit] = ColumnSpec(unit, "text")
        # the column's own spelling, which every later lookup compares with
        unit = next(c for c in columns if c.lower() == unit.lower())
        if any(c.missing_value is not None for n, c in columns.items()
               if n.lower() == unit.lower()):
            # every row without a person would become the rows of one made-up person
            raise CatalogError(f"table {name!r}: the privacy unit {unit!r} cannot have a "
                               "missing_value", hint="remove missing_value: rows without a "
                               "person are left out of every answer")
    row_privacy = not public and unit is None
    l0 = _positive_int(f"table {name!r}", "max_groups_per_unit",
                       raw.get("max_groups_per_unit", 1))
    linf = _positive_int(f"table {name!r}", "max_rows_per_group",
                         raw.get("max_rows_per_group", 1))
    total = raw.get("max_rows_per_unit")
    if total is not None:
        total = _positive_int(f"table {name!r}", "max_rows_per_unit", total)
        if unit is None:
            raise CatalogError(f"table {name!r}: max_rows_per_unit needs a privacy_unit column")
    if row_privacy and (l0 != 1 or linf != 1):
        raise CatalogError(
            f"table {name!r} has row privacy (privacy_unit: null) but declares "
            f"max_groups_per_unit={l0}, max_rows_per_group={linf}",
            hint="with row privacy each person is one row: drop these keys, or name the "
            "privacy_unit column",
        )
    omitted = [key for key in ("max_groups_per_unit", "max_rows_per_group") if key not in raw]
    if unit is not None and omitted:
        warnings.warn(
            f"table {name!r} does not declare {' or '.join(omitted)}: 1 is used, so each "
            "person's rows beyond one group and one row per group are dropped from every "
            f"answer; run `dpsql tune --metadata <this file> --table {name} --group-by "
            f"<the keys analysts group by> --epsilon 0.5` (Python: con.tune({name!r}, "
            "group_by=[...], epsilon=0.5)) for bounds chosen privately from the data, or "
            "declare them (a table of one row a person: declare 1 and 1)",
            BoundsDefaultWarning, stacklevel=4)
    key_bounds = _key_bounds(name, raw.get("key_bounds"), columns, unit, public, (l0, linf))
    source = raw.get("source")
    if source is not None:
        source = _expand(str(source), f"table {name!r}: source")
        if not _looks_like_table_name(source):
            source = str((base / source).resolve()) if not Path(source).is_absolute() else source
    return TableSpec(name=name, columns=columns, public=public, privacy_unit=unit,
                     max_groups_per_unit=l0, max_rows_per_group=linf,
                     max_rows_per_unit=total, key_bounds=key_bounds, source=source,
                     csv=_csv(name, raw.get("csv"), private=not public))


def _key_bounds(table: str, raw: Any, columns: dict[str, ColumnSpec], unit: str | None,
                public: bool, bounds: tuple[int, int]) -> tuple[KeyBounds, ...]:
    """A table's validated ``key_bounds``: each entry's columns (declared ones, not the unit,
    in their declared spelling) and its L0 and L∞ (the table's where it leaves one out)."""
    if raw is None:
        return ()
    where = f"table {table!r}: key_bounds"
    if public or unit is None:
        raise CatalogError(f"{where} need a privacy_unit column (a person with several rows)",
                           hint="remove key_bounds: a public table has no persons, and under "
                           "row privacy each person is one row in one group")
    example = "key_bounds: [{columns: [item], max_groups_per_unit: 200, max_rows_per_group: 1}]"
    if not isinstance(raw, list) or not raw:
        raise CatalogError(f"{where} must be a non-empty list of entries", hint=example)
    entries: dict[frozenset[str], KeyBounds] = {}
    for index, entry in enumerate(raw):
        found = _key_bound(f"{where}[{index}]", entry, columns, unit, bounds, example)
        if frozenset(found.columns) in entries:
            raise CatalogError(f"{where}: two entries list the columns {list(found.columns)}",
                               hint="keep one entry per set of columns")
        entries[frozenset(found.columns)] = found
    return tuple(entries.values())


def _key_bound(where: str, raw: Any, columns: dict[str, ColumnSpec], unit: str,
               bounds: tuple[int, int], example: str) -> KeyBounds:
    """One entry of ``key_bounds``, validated (``_key_bounds``)."""
    allowed = ("columns", "max_groups_per_unit", "max_rows_per_group")
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: expected a mapping, got {type(raw).__name__}",
                           hint=example)
    unknown = set(raw) - set(allowed)
    if unknown:  # a misspelt bound would leave the table's in place
        raise CatalogError(f"{where}: unknown key(s) {sorted(unknown, key=str)}",
                           hint=f"an entry's keys are {', '.join(allowed)}")
    if not {"max_groups_per_unit", "max_rows_per_group"} & set(raw):
        raise CatalogError(f"{where}: declares neither max_groups_per_unit nor "
                           "max_rows_per_group", hint=example)
    names = raw.get("columns")
    if not isinstance(names, list) or not names or \
            not all(isinstance(n, str) for n in names):
        raise CatalogError(f"{where}: columns must be a non-empty list of column names",
                           hint=example)
    spelled = []
    for written in names:
        spec = _by_name(columns, written)
        if spec is None:
            raise CatalogError(f"{where}: {written!r} is not a declared column of the table",
                               hint=f"columns are {', '.join(c for c in columns if c != unit)}")
        if spec.name.lower() == unit.lower():
            raise CatalogError(f"{where}: lists the privacy unit {written!r}", hint="a GROUP "
                               "BY of columns of one value a person already counts each "
                               "person in one group: list other columns")
        if spec.name in spelled:
            raise CatalogError(f"{where}: lists {written!r} twice", hint="list each column once")
        spelled.append(spec.name)
    l0, linf = (_positive_int(where, key, raw.get(key, default))
                for key, default in zip(allowed[1:], bounds, strict=True))
    return KeyBounds(tuple(spelled), l0, linf)


def _csv(table: str, raw: Any, private: bool = False) -> dict[str, Any]:
    """A table's validated CSV read options (``encoding`` in lower case). A private file
    without a header names its columns: its first row is a person's, and guessing its
    columns from the rows let one person's rows fail the connection on D′ alone.

    Example:
        >>> _csv("t", {None: "?", "encoding": "Latin-1"})
        {'null': '?', 'encoding': 'latin-1'}
    """
    raw = raw or {}
    if not isinstance(raw, dict):
        raise CatalogError(f"table {table!r}: csv must be a mapping of read options",
                           hint=f"csv keys are {', '.join(CSV_KEYS)}")
    # YAML reads an unquoted `null:` key as None: it means the option `null`
    raw = {"null" if key is None else key: value for key, value in raw.items()}
    unknown = set(raw) - set(CSV_KEYS)
    if unknown:
        raise CatalogError(f"table {table!r}: unknown csv key(s) {sorted(unknown, key=str)}",
                           hint=f"csv keys are {', '.join(CSV_KEYS)}")
    if private and raw.get("header", True) is False and "names" not in raw:
        raise CatalogError(f"table {table!r}: a private file without a header (header: false) "
                           "needs its columns' names", hint="add csv: {names: [...]}, every "
                           "column of the file in order")
    if "encoding" not in raw:
        return raw
    encoding = raw["encoding"]
    if not isinstance(encoding, str) or encoding.lower() not in ENCODINGS:
        raise CatalogError(f"table {table!r}: csv encoding must be one of {ENCODINGS}, got "
                           f"{encoding!r}", hint="DuckDB's reader knows these three: convert "
                           "a file in another encoding to UTF-8 (iconv -f <encoding> -t utf-8)")
    return {**raw, "encoding": encoding.lower()}


def _looks_like_table_name(source: str) -> bool:
    return not any(source.lower().endswith(ext) for ext in (".csv", ".parquet", ".tsv", ".data",
                                                            ".txt", ".csv.gz"))


def _expand(text: str, where: str) -> str:
    """``text`` with ``${VAR}`` replaced by the environment variable (``where`` names the
    key in errors)."""
    def sub(match: re.Match) -> str:
        var = match.group(1)
        if var == "DPSQL_DATASETS":
            return str(datasets_dir())
        if var not in os.environ:
            raise CatalogError(f"{where} uses ${{{var}}}, which is not set")
        return os.environ[var]

    return _ENV_PATTERN.sub(sub, text)


def _positive_int(where: str, key: str, value: Any) -> int:
    """``value`` of ``key`` as a whole number ≥ 1 (``where`` names the table, or the entry)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CatalogError(f"{where}: {key} must be a whole number ≥ 1, got {value!r}",
                           hint=f"write {key}: 1 or more, without quotes or decimals")
    return value


def _column(table: str, name: str, raw: Any) -> ColumnSpec:
    where = f"table {table!r}, column {name!r}"
    if isinstance(raw, str):
        raw = {"type": raw}
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: expected a mapping such as {{type: int, lower: 0, upper: 9}}")
    unknown = set(raw) - {"type", "lower", "upper", "values", "missing_value", "description"}
    if unknown:
        raise CatalogError(f"{where}: unknown key(s) {sorted(unknown)}",
                           hint="column keys are type, lower, upper, values and missing_value")
    col_type = raw.get("type", "text")
    if col_type not in COLUMN_TYPES:
        meant = _TYPE_NAMES.get(str(col_type).lower().split("(")[0].strip())
        raise CatalogError(f"{where}: type must be one of {', '.join(COLUMN_TYPES)}, got "
                           f"{col_type!r}", hint=f"write type: {meant}" if meant else
                           "declare the type dpsql reads the column as")
    lower, upper = raw.get("lower"), raw.get("upper")
    if (lower is None) != (upper is None):
        raise CatalogError(f"{where}: declare both lower and upper, or neither")
    if lower is not None and col_type in TEMPORAL:
        lower, upper = (_temporal_bound(where, label, bound, col_type)
                        for label, bound in (("lower", lower), ("upper", upper)))
        if temporal_number(lower, col_type) > temporal_number(upper, col_type):
            raise CatalogError(f"{where}: lower ({lower}) is later than upper ({upper})",
                               hint="swap the bounds")
    elif lower is not None:
        for label, bound in (("lower", lower), ("upper", upper)):
            if isinstance(bound, bool) or not isinstance(bound, (int, float)) or \
                    not _finite(bound):
                raise CatalogError(f"{where}: {label} must be a finite number, got {bound!r}")
        if col_type not in ("int", "float"):
            raise CatalogError(f"{where}: bounds are only for int, float, date and timestamp "
                               "columns")
        if lower > upper:
            raise CatalogError(f"{where}: lower ({lower}) is greater than upper ({upper})",
                               hint="swap the bounds")
    values = raw.get("values")
    if values is not None:
        values = _values(where, values, col_type)
    missing = raw.get("missing_value")
    if missing is not None:
        missing = _missing_value(where, missing, col_type, lower, upper, values)
    return ColumnSpec(name=name, type=col_type, lower=lower, upper=upper, values=values,
                      missing_value=missing)


_EXAMPLES = {"int": "0", "float": "0.0", "text": "'unknown'", "bool": "false"}


def _values(where: str, values: Any, kind: str) -> tuple:
    """A column's public domain: a non-empty list without duplicates or NULL, numbers on an
    int or float column (``values: ["a", "b"]`` on an int column was taken, and tune charged
    its ε before failing to read them as numbers), bools on a bool column."""
    if not isinstance(values, list) or not values:
        raise CatalogError(f"{where}: values must be a non-empty list (the public domain)")
    if len(set(map(repr, values))) != len(values):
        raise CatalogError(f"{where}: values has duplicates")
    if any(v is None for v in values):
        raise CatalogError(f"{where}: values lists null, which no row equals",
                           hint="drop it, and declare missing_value to read NULLs as a value")
    if kind == "text":
        # YAML reads 1, 1.0, yes and 2024-01-01 unquoted as an int, a float, a bool and a
        # date, each rendered as its text: [1, "1"] were two cells of one SQL literal, one
        # person's rows counted and released in both (adversary round 28w); a NUL or a lone
        # surrogate is no SQL text at all, and failed the statement after its charge
        wrong = [v for v in values if not isinstance(v, str) or re.search("[\x00\ud800-\udfff]", v)]
        if wrong:
            raise CatalogError(f"{where}: values of a text column must be texts without NUL "
                               f"or lone surrogates, got {wrong[0]!r}",
                               hint='quote them in YAML, e.g. values: ["1", "2"]')
    if kind in ("int", "float"):
        number = int if kind == "int" else (int, float)
        wrong = [v for v in values if isinstance(v, bool) or not isinstance(v, number)
                 or not _finite(v)]
        if wrong:
            raise CatalogError(f"{where}: values must be {kind} numbers, got {wrong[0]!r}",
                               hint=f"write values such as [{_EXAMPLES[kind]}, 1], or declare "
                               "the column as text")
    if kind == "bool":
        # a text 'True' equals no bool value: randomize drew every record uniformly
        wrong = [v for v in values if not isinstance(v, bool)]
        if wrong:
            raise CatalogError(f"{where}: values must be bool values, got {wrong[0]!r}",
                               hint="write values: [false, true] (unquoted in YAML), or leave "
                               "values out: a bool column's domain is (false, true)")
    if kind in TEMPORAL:
        # one type for a day on every path (DATE_TRUNC's and a DATE literal's domains hold
        # datetime.date): '2000-01-01' beside DATE_TRUNC(...) or a YAML date was two values
        values = [datetime.date.fromisoformat(_temporal_bound(where, "values", v, kind)[:10])
                  if kind == "date" else datetime.datetime.fromisoformat(
                      _temporal_bound(where, "values", v, kind)).replace(tzinfo=None)
                  for v in values]
        if len(set(values)) != len(values):
            raise CatalogError(f"{where}: values has duplicates")
    return tuple(values)


def _missing_value(where: str, value: Any, kind: str, lower, upper, values) -> Any:
    """The value a column's NULLs are read as, checked against its type, bounds and domain:
    a person's missing value then counts like any declared value, never beyond them."""
    if kind in TEMPORAL:
        # spelt as the SQL literals are: '20000101' or '2000-W01-1' was rendered as written,
        # and every statement reading the column failed, charged (adversary round 29h)
        text = _temporal_bound(where, "missing_value", value, kind)
        value = datetime.date.fromisoformat(text[:10]).isoformat() if kind == "date" else \
            datetime.datetime.fromisoformat(text).replace(tzinfo=None).isoformat(sep=" ")
        number = temporal_number(value, kind)
        inside = lower is None or \
            temporal_number(lower, kind) <= number <= temporal_number(upper, kind)
    else:
        expected = {"int": int, "float": (int, float), "text": str, "bool": bool}[kind]
        if isinstance(value, bool) != (kind == "bool") or not isinstance(value, expected) or \
                (kind == "float" and not math.isfinite(value)):
            raise CatalogError(f"{where}: missing_value must be a {kind} value, got {value!r}",
                               hint=f"write a {kind} such as {_EXAMPLES[kind]}")
        inside = lower is None or lower <= value <= upper
    if not inside:
        raise CatalogError(f"{where}: missing_value {value!r} is outside [{lower}, {upper}]",
                           hint="choose a missing_value within the column's bounds")
    if values is not None and (temporal_number(value, kind) not in
                               {temporal_number(v, kind) for v in values}
                               if kind in TEMPORAL else value not in values):
        raise CatalogError(f"{where}: missing_value {value!r} is not one of the column's values",
                           hint="choose one of the declared values (or add it to values)")
    return value


def _temporal_bound(where: str, label: str, bound: Any, kind: str) -> str:
    """A date or timestamp bound as its ISO text (YAML may give a date object)."""
    text = bound.isoformat() if hasattr(bound, "isoformat") else str(bound)
    try:
        temporal_number(text, kind)
        if kind == "date" and len(text) > 10:  # a time of day may follow, nothing else
            datetime.datetime.fromisoformat(text)
        offset = kind == "timestamp" and datetime.datetime.fromisoformat(text).utcoffset()
    except ValueError:
        raise CatalogError(f"{where}: {label} must be an ISO {kind} such as "
                           f"{'2024-01-31' if kind == 'date' else '2024-01-31 12:00:00'}, "
                           f"got {bound!r}") from None
    if offset:  # dropped, the bound was another instant than the one written
        raise CatalogError(f"{where}: {label} {bound!r} has a UTC offset",
                           hint="write the time in UTC without an offset: dpsql's timestamps "
                           "are UTC")
    return text


_EPOCH = datetime.date(1970, 1, 1)


def _finite(number: int | float) -> bool:
    """Whether a number is finite as a double (an int past 1.8e308 is not)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def temporal_number(text, kind: str) -> int:
    """A date as days since 1970-01-01, a timestamp as seconds since then (the IR's
    intervals of temporal values).

    Example:
        >>> temporal_number("1970-01-03", "date")
        2
        >>> temporal_number("1970-01-01 00:01:00", "timestamp")
        60
    """
    if kind == "date":
        value = text if isinstance(text, datetime.date) else datetime.date.fromisoformat(
            str(text)[:10])
        return (value - _EPOCH).days
    value = text if isinstance(text, datetime.datetime) else datetime.datetime.fromisoformat(
        str(text))
    return int((value.replace(tzinfo=None) - datetime.datetime(1970, 1, 1)).total_seconds())


def exact_bound(value: float | int) -> Fraction:
    """A declared bound as an exact Fraction (floats through their decimal repr)."""
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
