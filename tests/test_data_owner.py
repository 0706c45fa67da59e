"""The data owner's view: what the declared metadata costs (``truncation_report``) and how a
table's source file is read (``csv:`` options and the errors of a source that does not fit)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml
from conftest import require_dataset

import dpsql
from dpsql.catalog import load_catalog

USER_NAMES = ["uid", "age", "gender", "occupation", "zip"]


def _users(gender: dict, **zip_code) -> dict:
    """MovieLens 100K's u.user (943 persons, one row each) with ``gender`` declared."""
    path = require_dataset("ml-100k/u.user")
    columns = {"age": {"type": "int", "lower": 7, "upper": 60}, "gender": gender}
    if zip_code:
        columns["zip"] = zip_code
    return {"name": "ml_users", "budget": 10, "tables": {"users": {
        "source": str(path), "privacy_unit": None,
        "csv": {"delimiter": "|", "header": False, "names": USER_NAMES},
        "columns": columns}}}


def _user_frame() -> pd.DataFrame:
    return pd.read_csv(require_dataset("ml-100k/u.user"), sep="|", header=None,
                       names=USER_NAMES, dtype=str)


def _report(metadata: dict, table: str, tmp_path) -> dict:
    with dpsql.connect_custodian(metadata=metadata, ledger=tmp_path / "c.sqlite") as con:
        return {(e["bound"], e["group"]): e for e in con.truncation_report(table)}


def test_a_wrong_values_list_shows_every_row_dropped(tmp_path):
    """values: [m, f] on data 'M'/'F': GROUP BY gender answered pure noise, and the report
    said 0 rows affected (it had no entry for a declared domain)."""
    wrong = _report(_users({"type": "text", "values": ["m", "f"]}), "users", tmp_path)
    entry = wrong[("values", "gender")]
    assert (entry["rows"], entry["rows_affected"], entry["persons_affected"]) == (943, 943, 943)
    assert entry["rows_share"] == 1.0 and entry["limit"] == ["m", "f"]
    right = _report(_users({"type": "text", "values": ["M", "F"]}), "users", tmp_path)
    assert right[("values", "gender")]["rows_affected"] == 0


def test_values_clamped_and_nulls_are_counted_per_column(tmp_path):
    """Ages above 60 are clamped; zip codes that are not numbers (Canadian ones) are NULL as
    an int: each count against pandas on the file itself."""
    users = _user_frame()
    ages = users["age"].astype(int)
    numeric_zip = pd.to_numeric(users["zip"], errors="coerce")
    zip_code = {"type": "int", "lower": 0, "upper": 99999}
    report = _report(_users({"type": "text", "values": ["M"]}, **zip_code), "users", tmp_path)
    assert report[("lower/upper", "age")]["rows_affected"] == ((ages < 7) | (ages > 60)).sum()
    assert report[("NULL", "age")]["rows_affected"] == 0
    assert report[("values", "gender")]["rows_affected"] == (users["gender"] == "F").sum()
    nulls = report[("NULL", "zip")]
    assert nulls["rows_affected"] == numeric_zip.isna().sum() > 0
    assert nulls["effect"] == "NULL (skipped by its aggregates)" and nulls["limit"] is None
    read_as = _report(_users({"type": "text", "values": ["M", "F"]}, **zip_code,
                             missing_value=0), "users", tmp_path)[("NULL", "zip")]
    assert read_as["effect"] == "NULL (read as 0)"
    assert read_as["rows_affected"] == nulls["rows_affected"]


def test_a_column_of_another_type_shows_every_row_null(tmp_path):
    """Region names declared date (no bounds, no values) are NULL on every row as a date:
    the report had no entry for a column without bounds or values, so nothing showed it."""
    source = tmp_path / "c.csv"
    source.write_text("uid,region,day\n1,north,2024-01-02\n2,south,2024-03-04\n3,west,\n")
    meta = {"tables": {"c": {"source": str(source), "privacy_unit": "uid",
                             "max_groups_per_unit": 1, "max_rows_per_group": 1,
                             "columns": {"uid": "int", "region": "date", "day": "date"}}}}
    report = _report(meta, "c", tmp_path)
    region, day = report[("NULL", "region")], report[("NULL", "day")]
    assert (region["rows_affected"], region["rows_share"], region["persons_affected"]) == \
        (3, 1.0, 3)
    assert (day["rows_affected"], day["persons_affected"]) == (1, 1)


def test_a_domain_counts_persons_and_reads_nulls_as_the_missing_value(tmp_path):
    """Person-level: MovieLens ratings whose declared values leave out 5 (pandas counts the
    ratings of 5 and the users who gave one); a NULL read as a declared value is inside."""
    path = require_dataset("ml-100k/u.data")
    ratings = pd.read_csv(path, sep="\t", header=None, names=["user", "item", "rating", "ts"])
    meta = {"name": "ml", "budget": 10, "tables": {"ratings": {
        "source": str(path), "privacy_unit": "user", "max_groups_per_unit": 5,
        "max_rows_per_group": 1,
        "csv": {"delimiter": "\t", "header": False, "names": ["user", "item", "rating", "ts"]},
        "columns": {"user": "int", "rating": {"type": "int", "values": [1, 2, 3, 4]}}}}}
    report = _report(meta, "ratings", tmp_path)
    entry = report[("values", "rating")]
    fives = ratings[ratings["rating"] == 5]
    assert (entry["rows"], entry["persons"]) == (100_000, 943)
    assert entry["rows_affected"] == len(fives)
    assert entry["persons_affected"] == fives["user"].nunique()

    source = tmp_path / "t.csv"
    source.write_text("uid,kind\n1,a\n1,\n2,b\n3,x\n")
    meta = {"tables": {"t": {"source": str(source), "privacy_unit": "uid",
                             "max_groups_per_unit": 2, "max_rows_per_group": 1,
                             "columns": {"uid": "int", "kind": {
                                 "type": "text", "values": ["a", "b"], "missing_value": "a"}}}}}
    report = _report(meta, "t", tmp_path)
    assert report[("values", "kind")]["rows_affected"] == 1  # only x; the NULL reads as a
    assert report[("NULL", "kind")]["rows_affected"] == 1


def test_date_bounds_are_measured(tmp_path):
    """A date column with bounds made the report fail (its ISO bounds were read as numbers)."""
    source = tmp_path / "d.csv"
    source.write_text("uid,day\n1,2023-12-31\n1,2024-06-01\n2,2025-01-02\n3,\n")
    meta = {"tables": {"d": {"source": str(source), "privacy_unit": "uid",
                             "max_groups_per_unit": 1, "max_rows_per_group": 1,
                             "columns": {"day": {"type": "date", "lower": "2024-01-01",
                                                 "upper": "2024-12-31"}}}}}
    entry = _report(meta, "d", tmp_path)[("lower/upper", "day")]
    assert (entry["rows_affected"], entry["persons_affected"], entry["persons"]) == (2, 2, 3)


def test_the_domain_statements_are_logged_as_exact_accesses(tmp_path):
    meta = _users({"type": "text", "values": ["m", "f"]})
    with dpsql.connect_custodian(metadata=meta, ledger=tmp_path / "c.sqlite") as con:
        report = con.truncation_report()
        logged = [r["statement"] for r in con.ledger.history() if r["kind"] == "exact"]
    assert len(logged) == len(report) == 4  # age: clamped, NULL; gender: values, NULL
    assert any("NOT IN ('m', 'f')" in sql for sql in logged)


def _items(public: bool, **csv) -> dict:
    """MovieLens 100K's u.item: film titles in latin-1 (543 is 'Misérables, Les (1995)')."""
    path = require_dataset("ml-100k/u.item")
    table = {"public": True} if public else {"privacy_unit": None}
    return {"name": "ml_items", "budget": 10, "tables": {"items": {
        **table, "source": str(path),
        "csv": {"delimiter": "|", "header": False,
                "names": ["id", "title"] + [f"field{i}" for i in range(3, 25)], **csv},
        "columns": {"id": "int", "title": "text"}}}}


def test_a_latin1_file_is_read_with_its_encoding(tmp_path):
    with dpsql.connect(metadata=_items(True, encoding="Latin-1"), ledger=":memory:") as con:
        assert con.execute("SELECT title FROM items WHERE id = 543").fetchall() == [
            ("Misérables, Les (1995)",)]
    source = tmp_path / "u16.csv"
    source.write_text("uid,name\n1,Zoë\n2,Ågot\n", encoding="utf-16")
    meta = {"tables": {"t": {"source": str(source), "privacy_unit": None,
                             "csv": {"encoding": "utf-16"}, "columns": {"name": "text"}}}}
    with dpsql.connect_custodian(metadata=meta, ledger=tmp_path / "c.sqlite") as con:
        assert sorted(con.execute("SELECT name FROM t").fetchall()) == [("Zoë",), ("Ågot",)]


def test_a_decoding_error_hints_at_the_encoding_and_shows_a_public_files_message():
    """It said BinderException or InvalidInputException, message withheld, for any table."""
    with pytest.raises(dpsql.DataError) as public:
        dpsql.connect(metadata=_items(True), ledger=":memory:")
    assert "not utf-8 encoded" in public.value.message
    assert "encoding: latin-1" in public.value.hint
    with pytest.raises(dpsql.DataError) as other:  # not a decoding error: no encoding hint
        dpsql.connect(metadata=_items(True, encoding="utf-16"), ledger=":memory:")
    assert "encoding: latin-1" not in other.value.hint


def test_a_private_files_unreadable_rows_are_left_out_and_told_to_its_owner_only(tmp_path):
    """A private file's rows that cannot be read (not in its encoding, another number of
    fields) made the connection fail, on D′ alone when one person's row held them; they are
    left out, the analyst's connection says nothing of them (their count is of private rows)
    and the custodian's says how many, with what to change."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing said to the analyst
        with dpsql.connect(metadata=_items(False), ledger=":memory:") as con:
            assert con.catalog.tables["items"]  # opened
    with pytest.warns(dpsql.UnreadRowsWarning, match="encoding") as told:
        dpsql.connect_custodian(metadata=_items(False), ledger=tmp_path / "c.sqlite").close()
    unread = int(str(told[0].message).split(": ")[1].split(" ")[0])
    assert 0 < unread < 1682 and "Pocahontas" not in str(told[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read in its encoding: every row, nothing to tell
        dpsql.connect_custodian(metadata=_items(False, encoding="latin-1"),
                                ledger=tmp_path / "c.sqlite").close()
    with pytest.raises(dpsql.DataError) as other:  # not a decoding error: no encoding hint
        dpsql.connect(metadata=_items(True, encoding="utf-16"), ledger=":memory:")
    assert "encoding: latin-1" not in other.value.hint


@pytest.mark.parametrize(("csv", "message"), [
    ({"delim": "|"}, r"unknown csv key\(s\) \['delim'\]"),
    ({"encoding": "cp1252"}, "csv encoding must be one of"),
    ({"encoding": 8}, "csv encoding must be one of"),
])
def test_unknown_csv_keys_and_encodings_are_refused(csv, message):
    """Unknown csv keys were ignored: a misspelt delimiter read the file with the sniffed one."""
    with pytest.raises(dpsql.CatalogError, match=message) as refused:
        load_catalog({"tables": {"t": {"privacy_unit": None, "source": "t.csv", "csv": csv}}})
    assert "encoding" in refused.value.hint or "utf-8" in refused.value.hint
    if "delim" in csv:
        assert refused.value.hint == ("csv keys are delimiter, header, names, null, trim, "
                                      "encoding")


def test_a_declared_column_missing_from_the_source_is_named(tmp_path):
    """privacy_unit: uid on u.user, which has no uid column, said only 'BinderException'."""
    path = require_dataset("ml-100k/u.user")
    csv = {"delimiter": "|", "header": False, "names": ["user", "age", "gender", "job", "zip"]}
    table = {"source": str(path), "privacy_unit": "uid", "max_groups_per_unit": 1,
             "max_rows_per_group": 1, "csv": csv, "columns": {"age": "int"}}
    with pytest.raises(dpsql.DataError, match=r"lacks the declared column\(s\) \['uid'\]\n"):
        dpsql.connect(metadata={"tables": {"users": table}}, ledger=":memory:")
    # read with a header it has not got, a private file's first row would be its column names
    with pytest.raises(dpsql.DataError) as refused:
        dpsql.connect(metadata={"tables": {"users": {**table, "csv": {"delimiter": "|"}}}},
                      ledger=":memory:")
    assert "technician" not in str(refused.value) and "header: false" in refused.value.hint
    with pytest.raises(dpsql.DataError, match=r"its columns are \['age', 'gender', 'job'"):
        dpsql.connect(metadata={"tables": {"users": {"public": True, "source": str(path),
                                                     "csv": csv, "columns": {"uid": "int"}}}},
                      ledger=":memory:")
    parquet, database = tmp_path / "u.parquet", tmp_path / "u.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute(f"CREATE TABLE users AS SELECT * FROM read_csv('{path}', delim = '|', "
                    "names = ['user', 'age', 'gender', 'job', 'zip'], header = false)")
        con.execute(f"COPY users TO '{parquet}'")
    stored = {k: v for k, v in table.items() if k not in ("csv", "source")}
    for where, spec in ((None, {**stored, "source": str(parquet)}), (str(database), stored)):
        with pytest.raises(dpsql.DataError, match=r"lacks the declared column\(s\) \['uid'\]"):
            dpsql.connect(where, metadata={"tables": {"users": spec}}, ledger=":memory:")


def test_the_documented_csv_example_reads_the_shared_files(tmp_path):
    """docs/metadata.md's example read adult/adult.csv (no such file) with `null: "?"`, which
    YAML reads as the key None: it was ignored, and ' ?' is not '?' before the trim anyway."""
    adult = pd.read_csv(require_dataset("adult.csv"), dtype=str)
    require_dataset("ml-100k/u.user")
    text = (Path(__file__).parents[1] / "docs" / "metadata.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    block = next(b for b in blocks if "adult:" in b)
    meta = yaml.safe_load(block)
    assert meta["tables"]["adult"]["csv"] == {"trim": True, None: " ?"}
    with dpsql.connect_custodian(metadata=meta, ledger=tmp_path / "c.sqlite") as con:
        missing = con.execute("SELECT COUNT(*) - COUNT(workclass) FROM adult").fetchone()[0]
        genders = con.execute("SELECT COUNT(*) FROM users WHERE gender IN ('M', 'F')")
        assert genders.fetchone()[0] == 943
    assert missing == (adult["workclass"] == " ?").sum() > 1000


@pytest.mark.parametrize(("budget", "named"), [
    ({"epsilon": 1, "detla": 1e-6}, "['detla']"), ({"epsilom": 6, "delta": 1e-6}, "['epsilom']")])
def test_a_misspelt_budget_key_is_refused(budget, named):
    """{epsilon: 1, detla: 1e-6} was accepted with δ = 0; {epsilom: 6} was told the budget
    must be a mapping, which it is, without naming the key."""
    with pytest.raises(dpsql.CatalogError) as caught:
        load_catalog({"budget": budget, "tables": {"t": {"public": True}}})
    assert str(caught.value).startswith(f"unknown budget key(s) {named}")


def test_csv_options_on_a_table_of_a_duckdb_file_are_not_applied(tmp_path):
    """trim on a stored table that is cast failed with AttributeError (it has no source)."""
    database = tmp_path / "t.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE t AS SELECT ' 5 ' AS k, 1 AS uid")
    meta = {"tables": {"t": {"public": True, "csv": {"trim": True}, "columns": {"k": "int"}}}}
    with dpsql.connect(str(database), metadata=meta, ledger=":memory:") as con:
        assert con.execute("SELECT k FROM t").fetchall() == [(5,)]


# ---- contribution bounds: what L∞, L0 and R drop together, and for any GROUP BY ------------

def _purchases(folder: Path) -> tuple[pd.DataFrame, dict]:
    """400 persons with a heavy tail of purchases (1 to 60 rows) over 6 shops and 2024's
    months, and a public table grouping the shops; L0 2, L∞ 3, R 5 (R binds: L0·L∞ = 6)."""
    import numpy as np

    rng = np.random.default_rng(7)
    rows = np.minimum(rng.zipf(1.6, 400), 60)
    uid = np.repeat(np.arange(400), rows)
    days = pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 366, uid.size), "D")
    purchases = pd.DataFrame({"uid": uid, "shop": rng.integers(0, 6, uid.size),
                              "ts": days, "amount": rng.integers(1, 100, uid.size)})
    purchases.to_csv(folder / "purchases.csv", index=False)
    pd.DataFrame({"shop": range(6), "chain": list("aabbbc")}).to_csv(folder / "shops.csv",
                                                                     index=False)
    return purchases, {"name": "shop", "budget": 10, "tables": {
        "purchases": {"source": str(folder / "purchases.csv"), "privacy_unit": "uid",
                      "max_groups_per_unit": 2, "max_rows_per_group": 3,
                      "max_rows_per_unit": 5, "columns": {
                          "uid": "int", "shop": {"type": "int", "values": list(range(6))},
                          "ts": "timestamp", "amount": "int"}},
        "shops": {"public": True, "source": str(folder / "shops.csv"),
                  "columns": {"shop": "int", "chain": "text"}}}}


CONTRIBUTION = ("max_rows_per_group", "max_groups_per_unit", "both", "all")


def _dropped(frame: pd.DataFrame, keys: list, l0: int, linf: int, r: int) -> dict:
    """pandas: per person r rows, g groups, c rows within L∞; the rows each bound drops."""
    cells = frame.groupby(["uid", *keys]).size()
    person = pd.DataFrame({"r": cells.groupby("uid").sum(), "g": cells.groupby("uid").size(),
                           "c": cells.clip(upper=linf).groupby("uid").sum()})
    kept = person["c"] * (l0 / person["g"]).clip(upper=1)
    return {"max_rows_per_group": person["r"] - person["c"],
            "max_groups_per_unit": person["c"] - kept, "both": person["r"] - kept,
            "all": person["r"] - kept.clip(upper=r)}


def _check(entries: list[dict], expected: dict, rows: int) -> None:
    by = {e["bound"]: e for e in entries}
    assert set(by) == set(expected)
    for bound, lost in expected.items():
        entry = by[bound]
        assert entry["rows"] == rows and entry["persons"] == len(lost)
        assert entry["rows_affected"] == pytest.approx(lost.sum(), abs=0.05), bound
        assert entry["persons_affected"] == (lost > 1e-9).sum(), bound


def test_the_report_says_what_all_three_contribution_bounds_drop(tmp_path):
    """The max_groups_per_unit row is what L0 drops after L∞ (the docs read it as L0 alone),
    and no row applied max_rows_per_unit to a GROUP BY: `all` (L0, L∞ and R) against pandas."""
    purchases, meta = _purchases(tmp_path)
    with dpsql.connect_custodian(metadata=meta, ledger=tmp_path / "c.sqlite") as con:
        entries = [e for e in con.truncation_report("purchases") if e["bound"] in CONTRIBUTION]
    report = [e for e in entries if e["group"] == "shop"]
    expected = _dropped(purchases, ["shop"], 2, 3, 5)
    _check(report, expected, len(purchases))
    by = {e["bound"]: e for e in report}
    assert by["max_groups_per_unit"]["effect"] == "dropped (expected, after max_rows_per_group)"
    assert by["all"]["limit"] == [2, 3, 5]
    # R binds: L0·L∞ = 6 rows a person, R = 5
    assert by["all"]["rows_affected"] > by["both"]["rows_affected"] + 40
    ungrouped = {e["bound"]: e for e in entries if e["group"] == "(no GROUP BY)"}
    rows = purchases.groupby("uid").size()
    assert ungrouped["all"]["rows_affected"] == (rows - rows.clip(upper=3)).sum()


MONTHS = ("SELECT DATE_TRUNC('month', ts) AS month, COUNT(*) FROM purchases WHERE amount > 20 "
          "GROUP BY month")
CHAINS = "SELECT s.chain, COUNT(*) FROM purchases p JOIN shops s ON p.shop = s.shop GROUP BY 1"
SEGMENTS = ("SELECT c.segment, COUNT(*) FROM purchases p JOIN customers c ON p.uid = c.uid "
            "GROUP BY c.segment")


@pytest.mark.parametrize(("query", "key", "l0"), [
    (MONTHS, "month", 2), (CHAINS, "chain", 2),
    # one value a person: the engine keeps 1 group (L0 = 1), L∞ and R are the purchases'
    (SEGMENTS, "segment", 1)])
def test_a_querys_group_by_is_measured_exactly(tmp_path, query, key, l0):
    """Months, a key from a public table and a person's attribute from a table of persons had
    no exact measurement: the custodian saw only the declared columns' GROUP BYs. Over the
    rows the query reads (its WHERE), under the bounds the engine applies, against pandas;
    the read is logged as an exact access."""
    purchases, meta = _purchases(tmp_path)
    segment = pd.Series(["x", "y"] * 200)
    pd.DataFrame({"uid": range(400), "segment": segment}).to_csv(tmp_path / "customers.csv",
                                                                 index=False)
    meta["tables"]["customers"] = {
        "source": str(tmp_path / "customers.csv"), "privacy_unit": "uid",
        "max_groups_per_unit": 1, "max_rows_per_group": 1,
        "columns": {"uid": "int", "segment": "text"}}
    frame = purchases.assign(month=purchases["ts"].dt.to_period("M"),
                             chain=purchases["shop"].map(dict(enumerate("aabbbc"))),
                             segment=segment[purchases["uid"]].to_numpy())
    if "WHERE" in query:
        frame = frame[frame["amount"] > 20]
    with dpsql.connect_custodian(metadata=meta, ledger=tmp_path / "c.sqlite") as con:
        report = con.truncation_report(query=query)
        logged = [r["statement"] for r in con.ledger.history() if r["kind"] == "exact"]
    _check(report, _dropped(frame, [key], l0, 3, 5), len(frame))
    assert {e["group"] for e in report} == {key}
    assert {e["bound"]: e["limit"] for e in report}["all"] == [l0, 3, 5]
    assert len(logged) == 1 and logged[0].startswith(f"-- truncation report of: {query}")


def test_a_query_report_uses_the_bounds_the_engine_applies(tmp_path):
    """A key_bounds entry replaces the table's L0 and L∞ for its column; a query over public
    tables only, one setting bounds in OPTIONS, or both a table and a query, are refused with
    nothing logged."""
    purchases, meta = _purchases(tmp_path)
    meta["tables"]["purchases"]["key_bounds"] = [
        {"columns": ["shop"], "max_groups_per_unit": 6, "max_rows_per_group": 10}]
    query = "SELECT shop, COUNT(*) FROM purchases GROUP BY shop"
    with dpsql.connect_custodian(metadata=meta, ledger=tmp_path / "c.sqlite") as con:
        report = con.truncation_report(query=query)
        with pytest.raises(dpsql.NotSupportedError, match="no private table"):
            con.truncation_report(query="SELECT chain, COUNT(*) FROM shops GROUP BY chain")
        with pytest.raises(dpsql.ProgrammingError, match="a table or a query"):
            con.truncation_report("purchases", query=query)
        # the engine would tighten the bounds with them: the report would measure others
        with pytest.raises(dpsql.NotSupportedError, match="sets max_rows_contributed"):
            con.truncation_report(query=query.replace(
                "SELECT", "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(max_rows_contributed=2)"))
        assert len([r for r in con.ledger.history() if r["kind"] == "exact"]) == 1
        # L0 as the engine applies it, at most the keys' cells (it said the entry's 6)
        narrowed = con.truncation_report(query=query.replace("GROUP BY",
                                                             "WHERE shop IN (0, 1) GROUP BY"))
    assert {e["bound"]: e["limit"] for e in narrowed}["max_groups_per_unit"] == 2
    _check(report, _dropped(purchases, ["shop"], 6, 10, 5), len(purchases))
