"""One person's CSV rows that cannot be read (bytes not in the file's encoding, another number
of fields, a line longer than DuckDB's 2 MiB) made the analyst's DuckDB connection fail on D′
alone, refusing every statement where D answered. They are left out now (said to the custodian
only), so D and D′ answer alike, each part within its sensitivity."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))
import neighbours as nb  # noqa: E402

import dpsql  # noqa: E402

# (a quote left unmatched is not a row a CSV writer writes: docs/privacy.md, CSV sources)
UNREADABLE = [b'"42","Mon\xff\xfe","5","1"\n',  # not UTF-8
              b'"42","Mon","5","1","9"\n' * 40,  # a field too many, many times
              # a value past DuckDB's 2 MiB line among the rows its sniffer read (round D)
              b'"42","' + b"M" * 2_100_000 + b'","5","1"\n']


@pytest.fixture(params=range(len(UNREADABLE)))
def pair(request, tmp_path):
    base = nb.base_tables()
    for side in ("d", "d_prime"):
        nb.write_database(tmp_path / side, base)
    with open(tmp_path / "d_prime" / "visits.csv", "ab") as handle:
        handle.write(b'"42","Tue","7","2"\n' + UNREADABLE[request.param])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the analyst's connection says nothing of the rows
        warnings.simplefilter("ignore", dpsql.InsecureRandomnessWarning)
        connections = [dpsql.connect(metadata=nb.metadata(tmp_path / side), insecure_seed=11,
                                     ledger=tmp_path / f"{side}.sqlite")
                       for side in ("d", "d_prime")]
    yield nb.Pair(*connections, folders=(tmp_path / "d", tmp_path / "d_prime"))
    for con in connections:
        con.close()


@pytest.mark.parametrize("sql", ["SELECT COUNT(*) AS n FROM visits",
                                 "SELECT day, SUM(amount) AS s FROM visits GROUP BY day",
                                 "SELECT COUNT(DISTINCT uid) AS u FROM visits"])
def test_unreadable_rows_of_one_person_are_left_out_on_d_prime(pair, sql):
    assert nb.check_statement(pair, sql) == "released"
