"""A pooled connection notices that the owner rewrote a CSV source: DuckDB reads a CSV
once, when a connection opens, so an analyst whose connection was pooled before kept getting
new (charged) releases of the old rows (10,475) while another's first query read the new
file (104,605), until the pool evicted the connection."""

from __future__ import annotations

import os
import shutil

import pandas as pd
import psycopg
import pytest
import yaml
from server_harness import ROOT, serving, write_config

ANALYSTS = ["cy", "dee"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-sources")
    config = write_config(home, analysts=ANALYSTS, share=5.0, total=20.0)
    metadata = home / "private-metadata" / "visits.yaml"
    meta = yaml.safe_load(metadata.read_text())
    for name in ("visits", "regions"):  # the owner's copies, which the test rewrites
        meta["tables"][name]["source"] = str(shutil.copy(ROOT / "data" / f"{name}.csv", home))
    metadata.write_text(yaml.safe_dump(meta))
    yield from serving(home, config)


def count(server, user: str, tag: str) -> int:
    with psycopg.connect(server.dsn(user), autocommit=True) as con:
        con.execute("SET dpsql.epsilon = 1")
        return con.execute(f"SELECT COUNT(*) AS n FROM visits WHERE amount >= {tag}"
                           ).fetchone()[0]


def test_a_pooled_connection_reads_a_rewritten_source_anew(server):
    before = count(server, "cy", "0")  # cy's connection is pooled from here
    source = server.home / "visits.csv"
    rows = pd.read_csv(source)
    assert before == pytest.approx(10_450, rel=0.01)
    grown = pd.concat([rows.assign(uid=rows.uid + k * 10**6) for k in range(10)])
    grown.to_csv(f"{source}.new", index=False)
    os.replace(f"{source}.new", source)
    # each person is there ten times, under ten ids: ten times the bounded rows
    assert count(server, "cy", "0.0001") == pytest.approx(10 * before, rel=0.01)
    assert count(server, "dee", "0.0002") == pytest.approx(10 * before, rel=0.01)
    # the stored answer of the same statement was one of the old data: not given again
    assert count(server, "cy", "0") == pytest.approx(10 * before, rel=0.01)
