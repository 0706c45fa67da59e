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
# Arrow types whose cells DuckDB cannot hold in a scalar column: refused by type, at connect
_NESTED = ("is_list", "is_large_list", "is_fixed_size_list", "is_list_view",
           "is_large_list_view", "is_struct", "is_map", "is_union", "is_run_end_encoded")


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
    """Validate ``sources=``: declared table name -> a pyarrow Table of its declared columns,
    read totally (``total_frame``).

    Raises:
        InterfaceError: ``sources`` is not a mapping, or a value is not a frame.
        UnknownTableError: a key is not a table of the metadata.
        DataError: a frame lacks a declared column, or one has a type no column can have.

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
        declared = {c.lower() for c in table.columns}
        found[table.name] = total_frame(frame, lambda c: str(c).lower() in declared,
                                        table.name)
    return found


def total_frame(frame: Any, wanted: Callable[[object], bool], table: str) -> Any:
    """The ``wanted`` columns of a pandas DataFrame or pyarrow Table, as a pyarrow Table that
    DuckDB reads without failing on any value; what is converted is decided by the columns'
    types alone, never by their values.

    DuckDB typed a pandas object column from some of its values and failed on one person's
    value of another Python type (True among ints, a date among floats, a lone surrogate among
    strings): such a column becomes text (``_text``), which the declared type is read from as
    from a CSV field. Arrow refused a complex column (pandas infers one from a single 1j among
    floats): its real values are read as floats. DuckDB failed on Arrow text that is not UTF-8,
    and failed or invalidated the whole database on a timestamp or duration in seconds or
    milliseconds past its microsecond range and on a time of day outside one day: those values
    are replaced (``_total_column``). A column of a type that holds no scalar is refused.

    Raises:
        DataError: a wanted column is nested (a list, struct, map...) or of a type DuckDB
            does not read (a sparse pandas column, a 256-bit decimal).

    Example:
        >>> import pandas as pd
        >>> total_frame(pd.DataFrame({"x": pd.Series([1, True], dtype=object)}),
        ...             lambda c: True, "t").column("x").to_pylist()
        ['1', 'True']
    """
    import pyarrow as pa

    if _is_pandas(frame):
        kept = [i for i, c in enumerate(frame.columns) if wanted(c)]
        try:
            frame = pa.table([_pandas_arrow(frame.iloc[:, i]) for i in kept],
                             names=[str(frame.columns[i]) for i in kept])
        except (pa.ArrowException, TypeError, ValueError) as err:
            raise DataError(f"the in-memory source of table {table!r} has a column of a type "
                            f"dpsql cannot read ({type(err).__name__})",
                            hint="convert the frame's columns to numbers, text, booleans, "
                            "dates or timestamps") from None
    else:
        frame = frame.select([i for i, c in enumerate(frame.column_names) if wanted(c)])
    return pa.table([_total_column(frame.column(i), name, table)
                     for i, name in enumerate(frame.column_names)], names=frame.column_names)


def _total_column(column: Any, name: str, table: str) -> Any:
    """An Arrow column as DuckDB reads every value of it: text that is not UTF-8 decoded with
    U+FFFD, timestamps and durations in s or ms as us (NULL past that range), a time of day
    outside [0, 24h) NULL, half floats as floats; dictionaries and extension types by their
    values' type."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if isinstance(kind, pa.BaseExtensionType):  # kept where its storage is (DuckDB reads a UUID)
        storage = pa.chunked_array([c.storage for c in column.chunks], kind.storage_type)
        total = _total_column(storage, name, table)
        return column if total is storage else total
    if pa.types.is_dictionary(kind):
        return _total_column(column.cast(kind.value_type), name, table)
    if any(getattr(pa.types, test)(kind) for test in _NESTED) or (
            pa.types.is_decimal(kind) and kind.precision > 38):
        raise DataError(f"column {name!r} of the in-memory source of table {table!r} is a "
                        f"{kind}, which no declared column type reads",
                        hint="convert it to numbers, text, booleans, dates or timestamps "
                        "(a decimal to 38 digits at most), or leave it out of the metadata")
    if pa.types.is_float16(kind):  # DuckDB reads no half floats
        return column.cast(pa.float32())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or \
            pa.types.is_string_view(kind):
        if _is_utf8(column):  # the usual case: kept as it is, without a copy
            return column
        return pa.array([None if v is None else v.decode("utf-8", "replace")
                         for v in column.cast(pa.large_binary()).to_pylist()],
                        pa.large_string())
    if (pa.types.is_timestamp(kind) or pa.types.is_duration(kind)) and kind.unit in ("s", "ms"):
        factor = 1_000_000 if kind.unit == "s" else 1_000
        limit = (2**63 - 1) // factor
        ticks = column.cast(pa.int64())
        inside = pc.and_(pc.greater_equal(ticks, -limit), pc.less_equal(ticks, limit))
        wide = pa.timestamp("us", kind.tz) if pa.types.is_timestamp(kind) \
            else pa.duration("us")
        return pc.if_else(inside, pc.multiply(ticks, factor), None).cast(wide)
    if pa.types.is_time(kind):  # DuckDB failed converting a time past one day, or negative
        day = 86_400 * {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[kind.unit]
        ticks = column.cast(pa.int32() if pa.types.is_time32(kind) else pa.int64())
        inside = pc.and_(pc.greater_equal(ticks, 0), pc.less(ticks, day))
        return pc.if_else(inside, ticks, None).cast(kind)
    return column


def _is_utf8(column: Any) -> bool:
    """Whether an Arrow text column holds UTF-8 only (a linear, vectorised check)."""
    import pyarrow as pa
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _read_as_text(dtype: Any) -> bool:
    """A pandas dtype whose cells are Python objects of any type: object, text stored as
    Python strings (which may hold lone surrogates), or categories of either."""
    import pandas as pd
    if isinstance(dtype, pd.CategoricalDtype):
        dtype = dtype.categories.dtype
    return pd.api.types.is_object_dtype(dtype) or (
        isinstance(dtype, pd.StringDtype) and dtype.storage == "python")


def _pandas_arrow(column: Any) -> Any:
    """A pandas column as an Arrow array: by its dtype; as text (``_text``; the one Python
    loop) where ``_read_as_text``; complex numbers (which pandas infers from one complex value
    among floats, and Arrow does not hold) as their real part where it is the whole number,
    NULL elsewhere, so that the other rows read as they would in a column of floats."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    if _read_as_text(column.dtype):
        return pa.array([_text(v) for v in column], pa.large_string())
    if pd.api.types.is_complex_dtype(column.dtype):
        values = column.to_numpy()
        return pa.array(np.where(values.imag == 0, values.real, np.nan), from_pandas=True)
    return pa.array(column)


def _text(value: object) -> str | None:
    """A cell of a pandas object column as text, as a CSV field would hold it: None for a
    missing value (None, NaN, NaT, pd.NA) and where ``str`` itself fails (a 5,000-digit int);
    bytes decoded, anything else as ``str`` writes it; what is not UTF-8 (a lone surrogate, a
    bad byte) replaced by U+FFFD."""
    import pandas as pd
    if type(value) is str:  # the usual cell, without pandas' scalar checks
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    try:
        if value is None or pd.isna(value) is True:  # (a container's isna is an array)
            return None
        text = bytes(value).decode("utf-8", "replace") if isinstance(
            value, (bytes, bytearray, memoryview)) else str(value)
    except Exception:  # noqa: BLE001 - whatever one value's str raises, its cell is NULL
        return None
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


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
