"""Released results as pandas, Arrow, polars and NumPy frames, and as HTML for notebooks.

A frame holds the result set as released. With ``intervals=True`` each noisy aggregate is
followed by its 95% confidence interval, ``<col>_low`` and ``<col>_high`` (the columns that
``Cursor.intervals()`` adds). pyarrow and polars are optional: a missing one raises
InterfaceError naming the package to install.
"""

from __future__ import annotations

import importlib
from decimal import Decimal
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dpsql.errors import InterfaceError
from dpsql.result import NoisyResult

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import polars
    import pyarrow

_EXTRA = {"pyarrow": "dpsql[arrow]", "polars": "dpsql[polars]"}


def columns(result: NoisyResult, *, intervals: bool = False) -> dict[str, list]:
    """The result as column name -> values, then the noisy columns' intervals.

    Example:
        >>> from dpsql.release import ColumnInfo
        >>> result = NoisyResult([ColumnInfo("day", "text"), ColumnInfo("n", "int")],
        ...                      [("Mon", 7)], intervals={"n": [(5.0, 9.0)]})
        >>> columns(result, intervals=True)
        {'day': ['Mon'], 'n': [7], 'n_low': [5.0], 'n_high': [9.0]}
    """
    data = {c.name: [row[i] for row in result.rows] for i, c in enumerate(result.columns)}
    if intervals:
        for name, bounds in result.intervals.items():
            data[f"{name}_low"] = [None if b is None else b[0] for b in bounds]
            data[f"{name}_high"] = [None if b is None else b[1] for b in bounds]
    return data


def to_pandas(result: NoisyResult, *, intervals: bool = False) -> pd.DataFrame:
    """The result as a pandas DataFrame (the same frame as ``Cursor.fetchdf()``).

    Example:
        >>> from dpsql.release import ColumnInfo
        >>> to_pandas(NoisyResult([ColumnInfo("n", "int")], [(7,)])).to_dict("list")
        {'n': [7]}
    """
    import pandas as pd

    frame = pd.DataFrame(result.rows, columns=[c.name for c in result.columns])
    for i in range(len(result.columns)):  # by position: two outputs may share a name
        frame.isetitem(i, _exact_ints([row[i] for row in result.rows]))
    if intervals:  # the columns of Cursor.intervals(), in the same order
        for name, values in columns(result, intervals=True).items():
            if name not in frame.columns:
                frame[name] = _exact_ints(values)
    return frame


def _exact_ints(values: list) -> Any:
    """A column of ints and a NULL as pandas' nullable Int64, as DuckDB's ``df()`` gives it:
    as float64 (pandas' default) every int past 2^53 would be rounded. Told by the values
    (a custodian's columns carry DuckDB's type names)."""
    if any(v is None for v in values) and all(
            v is None or (type(v) is int and -2**63 <= v < 2**63) for v in values):
        import pandas as pd

        return pd.array(values, dtype="Int64")
    return values


def to_arrow(result: NoisyResult, *, intervals: bool = False) -> pyarrow.Table:
    """The result as a pyarrow Table, each column (and interval end) of its declared type,
    an int one past 64 bits as a 76-digit decimal (as a server widens it to numeric).

    Example:
        >>> from dpsql.release import ColumnInfo
        >>> to_arrow(NoisyResult([ColumnInfo("n", "int")], [(7,)])).to_pydict()
        {'n': [7]}
    """
    pa = _optional("pyarrow")
    arrow = {"int": pa.int64(), "float": pa.float64(), "text": pa.string(),
             "bool": pa.bool_(), "date": pa.date32(), "timestamp": pa.timestamp("us")}
    kinds = declared(result, intervals=intervals)
    arrays = {}
    for name, values in columns(result, intervals=intervals).items():
        kind = arrow.get(kinds[name])
        try:
            array = pa.array(values, type=kind)
        except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError):
            if kinds[name] == "int" and all(isinstance(v, int | None) for v in values):
                array = pa.array([None if v is None else Decimal(v) for v in values],
                                 type=pa.decimal256(76, 0))
            else:  # an expression's end of another type than its column's
                array = pa.array(values)
        arrays[name] = array
    return pa.table(arrays)


def declared(result: NoisyResult, *, intervals: bool = False) -> dict[str, str]:
    """Each column's declared type, an interval end's its column's (``columns``' names)."""
    kinds = {c.name: c.type for c in result.columns}
    if intervals:
        for name in result.intervals:
            kinds[f"{name}_low"] = kinds[f"{name}_high"] = kinds[name]
    return kinds


def to_polars(result: NoisyResult, *, intervals: bool = False) -> polars.DataFrame:
    """The result as a polars DataFrame (built from Python values: pyarrow not needed).

    Example:
        >>> from dpsql.release import ColumnInfo
        >>> to_polars(NoisyResult([ColumnInfo("n", "int")], [(7,)]))["n"].to_list()
        [7]
    """
    pl = _optional("polars")
    typed = {"int": pl.Int64, "float": pl.Float64, "text": pl.String, "bool": pl.Boolean,
             "date": pl.Date, "timestamp": pl.Datetime("us")}
    data, kinds = columns(result, intervals=intervals), declared(result, intervals=intervals)
    # a column of no value (no row released) takes its declared type, not Null
    empty = {name: typed[kinds[name]] for name, values in data.items()
             if kinds[name] in typed and all(v is None for v in values)}
    return pl.DataFrame(data, schema_overrides=empty, strict=False)


def to_numpy(result: NoisyResult, *, intervals: bool = False) -> dict[str, np.ndarray]:
    """The result as column name -> NumPy array (DuckDB's ``fetchnumpy`` shape).

    Example:
        >>> from dpsql.release import ColumnInfo
        >>> to_numpy(NoisyResult([ColumnInfo("n", "int")], [(7,)]))["n"]
        array([7])
    """
    import numpy as np

    frame = to_pandas(result, intervals=intervals)
    arrays = {}
    for name in frame.columns:
        column = frame[name]
        if column.dtype == "Int64":  # NULLs masked, as DuckDB's fetchnumpy masks them
            arrays[name] = np.ma.masked_array(column.to_numpy("int64", na_value=0),
                                              mask=column.isna().to_numpy())
        else:
            arrays[name] = column.to_numpy()
    return arrays


def result_html(result: NoisyResult | None, epsilon: float) -> str:
    """An HTML table of the result: each noisy value with its 95% interval beneath it.

    Example:
        >>> from dpsql.release import ColumnInfo
        >>> page = result_html(NoisyResult([ColumnInfo("n", "int")], [(7,)],
        ...                               intervals={"n": [(5.0, 9.0)]}), 1)
        >>> "<td>7<br><small>[5, 9]</small></td>" in page, "ε spent: 1" in page
        (True, True)
    """
    if result is None:
        return "<p>dpsql cursor: no result (call execute())</p>"
    names = [c.name for c in result.columns]
    import html  # its entity table costs a millisecond at start-up; only notebooks need it

    head = "".join(f"<th>{html.escape(str(n))}</th>" for n in names)
    body = []
    for r, row in enumerate(result.rows):
        cells = []
        for name, value in zip(names, row, strict=True):
            text = html.escape(_show(value))
            bounds = result.intervals.get(name)
            if bounds is not None and bounds[r] is not None:
                low, high = bounds[r]
                text += f"<br><small>[{_show(low)}, {_show(high)}]</small>"
            cells.append(f"<td>{text}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    note = f"ε spent: {float(epsilon):g}"
    if result.intervals:
        note += " · brackets: 95% confidence intervals of the noise"
    note += "".join(f"<br>{html.escape(text)}" for text in result.notes)
    return (f'<table class="dpsql-result"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table><p><small>{note}</small></p>")


def connection_html(*, dataset: str, analyst: str, backend: str, spent: Any,
                    remaining: Any) -> str:
    """An HTML summary of a connection: dataset, analyst, backend, budget spent and left.

    Example:
        >>> connection_html(dataset="visits", analyst="ann", backend="duckdb", spent="ε=1",
        ...                 remaining=None).count("<tr>")
        5
    """
    rows = [("dataset", dataset), ("analyst", analyst), ("backend", backend),
            ("spent", spent), ("remaining", "no budget declared" if remaining is None
                                else remaining)]
    import html

    body = "".join(f"<tr><th>{k}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f'<table class="dpsql-connection"><caption>dpsql connection</caption>{body}</table>'


def _show(value: Any) -> str:
    """A cell as text: floats with 6 significant digits, None as NULL."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _optional(package: str) -> ModuleType:
    try:
        return importlib.import_module(package)
    except ImportError as err:
        raise InterfaceError(f"this result format needs {package}, which is not installed",
                             hint=f"pip install '{_EXTRA[package]}' (or pip install "
                             f"{package})") from err
