"""In-memory sources: data frames that feed declared tables of the embedded DuckDB backend.

``connect(metadata=..., sources={"visits": frame})`` accepts a pandas, polars (eager or
lazy) or pyarrow frame, or a DuckDB relation, for each declared table. Each becomes a pandas
DataFrame or a pyarrow Table here, which the DuckDB backend copies into a typed table of the
declared columns before the database is locked. Anything else is refused with a dpsql error.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import duckdb

from dpsql.backends import is_spark_target
from dpsql.catalog import Catalog, TableSpec
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
        found[table.name] = total_frame(frame, table)
    return found


def total_frame(frame: Any, table: TableSpec) -> Any:
    """The declared columns of ``table`` in a pandas DataFrame or pyarrow Table, as a pyarrow
    Table that DuckDB reads without failing on any value; what is converted is decided by the
    columns' types alone, and a pandas object column's cells by each cell's value alone.

    DuckDB typed a pandas object column from some of its values and failed on one person's
    value of another Python type (True among ints, a date among floats, a lone surrogate among
    strings); read as each cell's text, one person's date among floats (which makes pandas
    infer ``object`` for the whole column) read everyone's 2.5 declared int as NULL, not 2. Each
    cell of such a column is read as a column of its own Python type is (``_object_column``).
    Arrow refused a complex column (pandas infers one from a single 1j among floats): its real
    values are read as floats. DuckDB failed on Arrow text that is not UTF-8, and failed or
    invalidated the whole database on a timestamp or duration in seconds or milliseconds past
    its microsecond range and on a time of day outside one day: those values are replaced
    (``_total_column``). A column of a type that holds no scalar is refused.

    Raises:
        DataError: a declared column is nested (a list, struct, map...) or of a type DuckDB
            does not read (a sparse pandas column, a 256-bit decimal).

    Example:
        >>> import pandas as pd
        >>> from dpsql.catalog import load_catalog
        >>> t = load_catalog({"tables": {"t": {"privacy_unit": None,
        ...                                    "columns": {"x": "text"}}}}).table("t")
        >>> total_frame(pd.DataFrame({"x": pd.Series([1, True], dtype=object)}),
        ...             t).column("x").to_pylist()
        ['1', 'true']
    """
    import pyarrow as pa

    declared = {c.lower(): c for c in table.columns}
    if _is_pandas(frame):
        kept = [i for i, c in enumerate(frame.columns) if str(c).lower() in declared]
        try:
            frame = pa.table([_pandas_arrow(frame.iloc[:, i], table,
                                            declared[str(frame.columns[i]).lower()])
                              for i in kept],
                             names=[str(frame.columns[i]) for i in kept])
        except (pa.ArrowException, TypeError, ValueError) as err:
            raise DataError(f"the in-memory source of table {table.name!r} has a column of a "
                            f"type dpsql cannot read ({type(err).__name__})",
                            hint="convert the frame's columns to numbers, text, booleans, "
                            "dates or timestamps") from None
    else:
        frame = frame.select([i for i, c in enumerate(frame.column_names)
                              if c.lower() in declared])
    return pa.table([_total_column(frame.column(i), name, table.name)
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


def _pandas_arrow(column: Any, table: TableSpec, name: str) -> Any:
    """A pandas column (the declared column ``name``) as an Arrow array: by its dtype; cell by
    cell (``_object_column``) where ``_read_as_text``; complex numbers (which pandas infers from
    one complex value among floats, and Arrow does not hold) as their real part where it is the
    whole number, NULL elsewhere, so that the other rows read as they would in a column of
    floats."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    if _read_as_text(column.dtype):
        return _object_column(column, table, name)
    if pd.api.types.is_complex_dtype(column.dtype):
        values = column.to_numpy()
        return pa.array(np.where(values.imag == 0, values.real, np.nan), from_pandas=True)
    return pa.array(column)


def _object_column(column: Any, table: TableSpec, name: str) -> Any:
    """A pandas column of Python objects, each cell read as the declared column reads a
    column of that cell's own type (``_pieces``): 2.5 as a float, True as a boolean, a date as
    a date, whatever the other cells are. Cells of one Arrow type make an array of it, read by
    DuckDB as a frame's column is; cells of several are read piece by piece in the declared
    type by that same rule (``duckdb._column_sql``) on a scratch connection, and put back in
    place. The cells are grouped by their Python type in C; only rare types, and a type's
    cells that Arrow does not take at once (an int past 64 bits, a lone surrogate), are looked
    at one by one."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    values = column.to_numpy(dtype=object)
    codes, types = pd.factorize(np.frompyfunc(type, 1, 1)(values))
    order = np.argsort(codes, kind="stable")  # the rows of each Python type, in turn
    ends = np.cumsum(np.bincount(codes, minlength=len(types)))[:-1]
    pieces = [piece for kind, rows in zip(types, np.split(order, ends))
              for piece in _pieces(kind, values[rows], rows)]
    if len(pieces) <= 1:
        return pieces[0][1] if pieces else pa.array([], pa.large_string())
    from dpsql.backends.duckdb import _column_sql  # the rule a frame's column is read by

    spec = replace(table, columns={name: table.columns[name]}, csv={})
    scratch, read = duckdb.connect(), []
    try:
        for _, array in pieces:
            scratch.register("piece", pa.table({name: array}))
            read.append(scratch.sql(f"SELECT {_column_sql(spec, name)} FROM piece")
                        .to_arrow_table().column(0).combine_chunks())
    finally:
        scratch.close()
    rows = np.concatenate([rows for rows, _ in pieces])
    place = np.empty(len(rows), np.int64)
    place[rows] = np.arange(len(rows))  # where each row's value is among the pieces read
    return pa.concat_arrays(read).take(pa.array(place))


@functools.cache
def _bulk_types() -> dict[type, Any]:
    """Python and NumPy scalar types whose cells Arrow converts at once, and to what."""
    import datetime

    import numpy as np
    import pyarrow as pa
    return {str: pa.large_string(), float: pa.float64(), np.float64: pa.float64(),
            int: pa.int64(), np.int64: pa.int64(), bool: pa.bool_(), np.bool_: pa.bool_(),
            datetime.date: pa.date32()}


def _pieces(kind: type, cells: Any, rows: Any) -> list[tuple[Any, Any]]:
    """The cells of one Python type (at ``rows``), as (rows, Arrow array) of one Arrow type
    each: at once where ``_bulk_types`` can, else cell by cell (``_cell``)."""
    import numpy as np
    import pyarrow as pa

    bulk = _bulk_types().get(kind)
    if bulk is not None:
        try:
            return [(rows, pa.array(cells, bulk, from_pandas=True))]  # NaN is NULL
        except (pa.ArrowException, OverflowError, UnicodeError):
            pass  # a cell this type's column cannot hold: each read by itself
    by_type: dict[Any, tuple[list[int], list[Any]]] = {}
    for row, value in zip(rows, cells):
        arrow_type, cell = _cell(value)
        rows_of, cells_of = by_type.setdefault(arrow_type, ([], []))
        rows_of.append(row)
        cells_of.append(cell)
    return [(np.asarray(r, np.int64), pa.array(c, t)) for t, (r, c) in by_type.items()]


# the ints an int64 and a uint64 column hold (``_cell``)
_INT64, _UINT64 = (-2**63, 2**63), (0, 2**64)


def _cell(value: object) -> tuple[Any, Any]:
    """The Arrow type a pandas column of ``value``'s Python type has, and the value to put in
    it: bool as a boolean; an int within 64 bits as int64 (uint64 up to 2**64); float and
    Decimal as float64 (a NumPy float32 or float16 as float32); complex as its real part
    (NULL if it has an imaginary one), as a complex column is; date as date32; datetime as a
    timestamp in us (a ``pd.Timestamp`` in ns stays in ns), in UTC if it is aware; anything
    else (str, bytes, a missing value, an int past 64 bits) as its text (``_text``); a value
    its type fails to convert (a ``pd.Timestamp`` past the us range) as NULL."""
    import datetime
    import decimal

    import numpy as np
    import pandas as pd
    import pyarrow as pa

    try:
        if value is None or pd.isna(value) is True:
            return pa.large_string(), None
        if isinstance(value, (bool, np.bool_)):
            return pa.bool_(), bool(value)
        if isinstance(value, (int, np.integer)):
            number = int(value)
            if _INT64[0] <= number < _INT64[1]:
                return pa.int64(), number
            if _UINT64[0] <= number < _UINT64[1]:
                return pa.uint64(), number
        elif isinstance(value, (np.float32, np.float16)):
            return pa.float32(), float(value)
        elif isinstance(value, (float, np.floating, decimal.Decimal)):
            return pa.float64(), float(value)
        elif isinstance(value, (complex, np.complexfloating)):  # as a complex column is
            return pa.float64(), value.real if value.imag == 0 else None
        elif isinstance(value, datetime.datetime):  # pd.Timestamp too: in ns, else us
            exact = isinstance(value, pd.Timestamp) and value.unit == "ns"
            stamp = value if exact or not isinstance(value, pd.Timestamp) \
                else value.as_unit("us")
            aware = value.tzinfo is not None and value.utcoffset() is not None
            return pa.timestamp("ns" if exact else "us", "UTC" if aware else None), stamp
        elif isinstance(value, datetime.date):
            return pa.date32(), value
    except (ArithmeticError, TypeError, ValueError):  # a value its type cannot convert
        return pa.large_string(), None
    return pa.large_string(), _text(value)


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
