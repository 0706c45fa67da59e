"""In-memory sources: data frames that feed declared tables of the embedded DuckDB backend.

``connect(metadata=..., sources={"visits": frame})`` accepts a pandas, polars (eager or
lazy) or pyarrow frame, or a DuckDB relation, for each declared table. Each becomes a pandas
DataFrame or a pyarrow Table here, which the DuckDB backend copies into a typed table of the
declared columns before the database is locked. Anything else is refused with a dpsql error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import duckdb

from dpsql.backends import is_spark_target
from dpsql.catalog import Catalog
from dpsql.errors import DataError, InterfaceError, UnknownTableError

KINDS = "a pandas, polars or pyarrow DataFrame/Table, or a DuckDB relation"


def _is_pandas(obj: object) -> bool:
    # pandas is imported only when a frame could be one: never, if it was never imported
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(obj, pandas.DataFrame)


def _is(module: str, *names: str) -> Callable[[object], bool]:
    def matches(obj: object) -> bool:
        kind = type(obj)
        return kind.__module__.split(".")[0] == module and kind.__name__ in names
    return matches


def _arrow_of_relation(relation: duckdb.DuckDBPyRelation) -> Any:
    try:
        return relation.fetch_arrow_table()
    except ImportError as err:
        raise InterfaceError("a DuckDB relation is read as Arrow, and pyarrow is not "
                             "installed", hint="pip install 'dpsql[arrow]'") from err


def _arrow_of_polars(frame: Any) -> Any:
    if type(frame).__name__ == "LazyFrame":
        frame = frame.collect()
    try:
        return frame.to_arrow()
    except ImportError as err:
        raise InterfaceError("a polars frame is read as Arrow, and pyarrow is not installed",
                             hint="pip install 'dpsql[arrow]'") from err


def _table_of_batches(batches: Any) -> Any:
    import pyarrow as pa
    if type(batches).__name__ == "RecordBatch":
        return pa.Table.from_batches([batches])
    return batches.read_all()


# (is it this kind?, convert it to a pandas DataFrame or a pyarrow Table)
CONVERTERS: list[tuple[Callable[[object], bool], Callable[[Any], Any]]] = [
    (lambda obj: _is_pandas(obj), lambda frame: frame),
    (_is("pyarrow", "Table"), lambda table: table),
    (_is("pyarrow", "RecordBatch", "RecordBatchReader"), _table_of_batches),
    (_is("polars", "DataFrame", "LazyFrame"), _arrow_of_polars),
    (lambda obj: isinstance(obj, duckdb.DuckDBPyRelation), _arrow_of_relation),
]


def is_frame(obj: object) -> bool:
    """True for an object ``sources=`` accepts.

    Example:
        >>> import pandas as pd
        >>> is_frame(pd.DataFrame({"x": [1]})), is_frame("visits.duckdb")
        (True, False)
    """
    return any(matches(obj) for matches, _ in CONVERTERS)


def frame_sources(sources: Mapping[str, Any] | None, catalog: Catalog) -> dict[str, Any]:
    """Validate ``sources=``: declared table name -> a pandas DataFrame or pyarrow Table.

    Raises:
        InterfaceError: ``sources`` is not a mapping, or a value is not a frame.
        UnknownTableError: a key is not a table of the metadata.
        DataError: a frame lacks a declared column.

    Example:
        >>> from dpsql.catalog import load_catalog
        >>> catalog = load_catalog({"tables": {"t": {"privacy_unit": None,
        ...                                          "columns": {"x": "int"}}}})
        >>> import pandas as pd
        >>> list(frame_sources({"T": pd.DataFrame({"x": [1, 2]})}, catalog))
        ['t']
    """
    if not sources:
        return {}
    if not isinstance(sources, Mapping):
        raise InterfaceError(f"sources must be a mapping of table name to frame, got "
                             f"{type(sources).__name__}",
                             hint='pass sources={"table": frame} for tables of the metadata')
    found: dict[str, Any] = {}
    for name, obj in sources.items():
        table = catalog.table(str(name))
        if table is None:
            raise UnknownTableError(
                f"sources names the table {name!r}, which the metadata does not declare",
                hint="declare the table (privacy unit, columns, bounds) under 'tables:' in "
                "the metadata; an in-memory source only supplies its rows")
        convert = next((c for matches, c in CONVERTERS if matches(obj)), None)
        if convert is None:
            raise InterfaceError(f"the source of table {table.name!r} is a "
                                 f"{type(obj).__module__}.{type(obj).__name__}, not a frame",
                                 hint=f"pass {KINDS}")
        frame = convert(obj)
        missing = table.missing_columns(frame.columns if _is_pandas(frame)
                                        else frame.column_names)
        if missing:
            raise DataError(f"the in-memory source of table {table.name!r} lacks the declared "
                            f"column(s) {missing}",
                            hint="rename the frame's columns, or fix the metadata's columns")
        found[table.name] = frame
    return found


def check_database(database: object) -> None:
    """Refuse a ``database`` argument that is not a database's name, URL or SparkSession.

    A frame or a DuckDB connection passed as ``database`` was once turned into a file named
    after its ``str()``; data go in ``sources=`` instead.

    Raises:
        InterfaceError: ``database`` is a frame, a DuckDB connection or an unknown object.

    Example:
        >>> check_database("visits.duckdb")
        >>> import pandas as pd
        >>> check_database(pd.DataFrame({"x": [1]}))
        Traceback (most recent call last):
        ...
        dpsql.InterfaceError: database must be a DuckDB file path, ... not a pandas.DataFrame
        Hint: pass the data as sources={"<table>": frame}, ...
    """
    if database is None or isinstance(database, (str, os.PathLike)) or is_spark_target(
            database):
        return
    kind = f"{type(database).__module__}.{type(database).__name__}"
    if isinstance(database, duckdb.DuckDBPyConnection):
        hint = ('pass its file path as database, or its tables as sources={"<table>": '
                'con.table("<table>")}')
    elif is_frame(database):
        hint = ('pass the data as sources={"<table>": frame}, with the table declared in the '
                'metadata, and leave database out')
    else:
        hint = f'pass a path or URL as database, or {KINDS} in sources={{"<table>": frame}}'

    raise InterfaceError(f"database must be a DuckDB file path, a postgresql:// URL, a Spark "
                         f"master or a SparkSession, not a {kind}", hint=hint)
