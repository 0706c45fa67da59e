"""What compiling a big statement costs: a comparison's SQL is rendered for its message only
when it fails (every comparison was rendered, a sqlglot deep copy each: 7.5 s of a 1,000-tree
forest's 47 s), a column's domain is checked once and not again on each reference (a
1,000-value column read in 7,000 comparisons was 7 M steps), and a refused GROUP BY key's
message shows the start of its SQL (a tree's leaf key printed 29 kB)."""

from __future__ import annotations

import pytest
from sqlglot import exp

import dpsql
from dpsql.compile.ir import ColumnInfo, column


def test_a_column_reference_keeps_its_checked_domain():
    info = ColumnInfo("c0", "int", domain=tuple(range(1000)))
    assert column(info).domain is info.domain
    assert ColumnInfo("c1", "float", domain=(1.0, 1.0, float("nan"), float("nan"))).domain \
        .__len__() == 2  # still checked once, where the column is made


def test_comparisons_are_rendered_only_when_they_fail(connect, monkeypatch):
    rendered = []
    sql = exp.Expression.sql

    def counting(self, *args, **kwargs):
        if isinstance(self, exp.EQ):
            rendered.append(self)
        return sql(self, *args, **kwargs)

    monkeypatch.setattr(exp.Expression, "sql", counting)
    whens = " ".join(f"WHEN age = {a} THEN {a % 3}" for a in range(17, 91))
    connect().explain(f"SELECT CASE {whens} END AS k, COUNT(*) AS n FROM adult GROUP BY 1")
    assert rendered == []
    with pytest.raises(dpsql.ProgrammingError, match="the comparison sex = age mixes values "
                       "of types int, text"):
        connect().explain("SELECT COUNT(*) AS n FROM adult WHERE sex = age")


@pytest.mark.parametrize(("column", "message"), [
    ("amount", ("the GROUP BY key 'CASE WHEN amount < 0 THEN amount + 0 WHEN amount < 1 THEN"
                " am...' has no public domain")),
    ("uid", ("GROUP BY 'CASE WHEN amount < 0 THEN uid + 0 WHEN amount < 1 THEN uid +...' is "
             "computed from the privacy unit")),
])
def test_a_refused_key_shows_the_start_of_its_sql(connect, column, message):
    whens = " ".join(f"WHEN amount < {i} THEN {column} + {i}" for i in range(100))
    with pytest.raises(dpsql.PrivateGroupKeysError) as refused:
        connect().explain(f"SELECT CASE {whens} END AS k, COUNT(*) AS n FROM visits GROUP BY 1")
    assert refused.value.message.startswith(message)
    assert len(str(refused.value)) < 800  # the key alone is 2,800 characters
