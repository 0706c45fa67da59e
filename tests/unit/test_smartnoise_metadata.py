"""SmartNoise SQL metadata import: mapping, warnings, refusals, a real query, the CLI command."""

from __future__ import annotations

import warnings
from pathlib import Path

import duckdb
import pytest
import yaml
from click.testing import CliRunner

import dpsql
from dpsql.catalog import load_catalog
from dpsql.smartnoise_metadata import SmartNoiseImportWarning, command, from_smartnoise

# Written by hand after SmartNoise's PUMS.yaml / PUMS_pid.yaml samples and the format in
# snsql/metadata.py (CollectionYamlLoader): one collection, schemas, tables; table options
# beside the columns.
SMARTNOISE_YAML = """\
engine: duckdb
PUMS:
  PUMS:
    PUMS:
      rows: 1000
      row_privacy: true
      age: {type: int, lower: 0, upper: 100}
      sex: {type: string}
      married: {type: boolean}
      income: {type: float, lower: 0, upper: 500000}
    PUMS_pid:
      rows: 1200
      max_ids: 3
      censor_dims: false
      clamp_counts: true
      pid: {type: int, private_id: true}
      age: {type: int, lower: 0, upper: 100}
      educ: {type: string, cardinality: 16}
      income: {type: float, lower: 0, upper: 500000, sensitivity: 500000}
      visited: {type: datetime}
      married: {type: boolean, missing_value: false}
"""


@pytest.fixture
def smartnoise_file(tmp_path: Path) -> Path:
    path = tmp_path / "PUMS.yaml"
    path.write_text(SMARTNOISE_YAML)
    return path


def _convert(source) -> tuple[dict, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SmartNoiseImportWarning)
        metadata = from_smartnoise(source)
    assert all(issubclass(w.category, SmartNoiseImportWarning) for w in caught)
    return metadata, [str(w.message) for w in caught]


def test_tables_units_bounds_and_types(smartnoise_file):
    metadata, _ = _convert(smartnoise_file)
    assert metadata["name"] == "PUMS"
    assert metadata["neighbouring"] == "add_remove"
    # named as SmartNoise queries write them (FROM PUMS.PUMS)
    rows, users = metadata["tables"]["PUMS.PUMS"], metadata["tables"]["PUMS.PUMS_pid"]
    assert rows["privacy_unit"] is None
    assert "max_groups_per_unit" not in rows  # row privacy: one row per person
    assert users["privacy_unit"] == "pid"
    # max_ids=3 keeps every row SmartNoise keeps: 3 groups, or 3 rows in one group, and
    # at most 3 rows in all, so a count's sensitivity is SmartNoise's 3, not 3·3
    assert (users["max_groups_per_unit"], users["max_rows_per_group"],
            users["max_rows_per_unit"]) == (3, 3, 3)
    assert users["columns"]["age"] == {"type": "int", "lower": 0, "upper": 100}
    assert users["columns"]["income"] == {"type": "float", "lower": 0.0, "upper": 500000.0}
    assert {name: spec["type"] for name, spec in users["columns"].items()} == {
        "pid": "int", "age": "int", "educ": "text", "income": "float", "visited": "timestamp",
        "married": "bool"}  # a SmartNoise datetime keeps its time of day
    catalog = load_catalog(metadata)
    assert catalog.table("pums.pums_pid").max_rows_per_group == 3
    assert catalog.table("PUMS.PUMS").is_row_privacy


def test_what_cannot_be_carried_over_is_warned(smartnoise_file):
    _, messages = _convert(smartnoise_file)
    text = "\n".join(messages)
    assert "'PUMS.PUMS', column 'sex' is text" in text  # no public domain
    assert "'PUMS.PUMS_pid', column 'educ' is text" in text
    assert "censor_dims: false" in text
    assert "clamp_counts" in text
    assert "sensitivity 500000" in text
    assert "missing_value" not in text  # carried over (test_missing_values_are_carried_over)
    assert "no privacy budget" in text
    assert not any("'pid'" in m for m in messages)  # the unit is not a GROUP BY candidate


def test_missing_values_are_carried_over(smartnoise_file):
    metadata, _ = _convert(smartnoise_file)
    married = metadata["tables"]["PUMS.PUMS_pid"]["columns"]["married"]
    assert married == {"type": "bool", "missing_value": False}
    assert load_catalog(metadata).table("PUMS.PUMS_pid").column("married").missing_value \
        is False


def test_converted_catalogue_answers_queries(smartnoise_file, tmp_path):
    metadata, _ = _convert(smartnoise_file)
    metadata["budget"] = {"epsilon": 10_000}  # the owner's decision, warned about
    database = tmp_path / "census.duckdb"  # not pums: DuckDB would not tell it from PUMS
    with duckdb.connect(str(database)) as raw:  # SmartNoise's layout: schema PUMS
        raw.execute("CREATE SCHEMA PUMS")
        raw.execute("CREATE TABLE PUMS.PUMS AS SELECT i AS age, i % 2 = 0 AS married, "
                    "'x' AS sex, 1000.0 * i AS income FROM range(100) t(i)")
        raw.execute("CREATE TABLE PUMS.PUMS_pid AS SELECT i // 4 AS pid, i % 90 AS age, "
                    "'HS' AS educ, 10.0 AS income, TIMESTAMP '2020-01-01 10:30' AS visited, "
                    "i % 3 = 0 AS married FROM range(400) t(i)")
    with dpsql.connect(str(database), metadata=metadata, ledger=":memory:",
                       insecure_seed=3) as con:
        plan = con.explain("SELECT married, COUNT(*) AS n FROM PUMS.PUMS_pid GROUP BY married",
                           epsilon=1.0)
        # min(L0·L∞, R): L0 capped by the 2 public groups of a boolean gives 2·3, R gives 3
        assert plan["total_sensitivity"] == 3
        assert con.explain("SELECT COUNT(*) FROM PUMS.PUMS_pid", epsilon=1.0)[
            "total_sensitivity"] == 3
        assert con.explain("SELECT SUM(age) FROM PUMS.PUMS", epsilon=1.0)[
            "total_sensitivity"] == 100
        assert con.execute("SELECT COUNT(*) AS n FROM PUMS.PUMS_pid WHERE "
                           "visited > TIMESTAMP '2020-01-01 10:00'", epsilon=1000.0
                           ).fetchall()[0][0] > 250  # the time of day is kept
        rows = con.execute("SELECT married, COUNT(*) AS n FROM PUMS.PUMS_pid GROUP BY married",
                           epsilon=1000.0).fetchall()
    # 100 persons with 4 rows each: R = 3 keeps at most 3 rows per person in all
    assert sorted(r[0] for r in rows) == [False, True]
    assert 200 <= sum(r[1] for r in rows) <= 300 + 5


@pytest.mark.parametrize("change,match", [
    (lambda m: m["PUMS"]["PUMS"]["PUMS_pid"]["age"].update(private_id=True),
     "columns \\['pid', 'age'\\] with private_id"),
    (lambda m: m["PUMS"]["PUMS"]["PUMS"]["age"].update(type="decimal"), "'age'.*type must be"),
    (lambda m: m["PUMS"]["PUMS"]["PUMS"]["age"].pop("upper"), "only one of lower and upper"),
    (lambda m: m["PUMS"]["PUMS"]["PUMS"]["sex"].update(lower=0, upper=1), "bounds on a string"),
    (lambda m: m["PUMS"]["PUMS"]["PUMS_pid"].update(max_ids=0), "max_ids must be"),
    (lambda m: m.update(Other={"s": {"t": {"row_privacy": True}}}), "exactly one collection"),
    (lambda m: m["PUMS"].update(pums={"pums": {"row_privacy": True}}), "same name"),
    (lambda m: m["PUMS"]["PUMS"]["PUMS"]["age"].update(lower=50, upper=10), "greater than"),
])
def test_refusals_name_table_and_column(change, match):
    metadata = yaml.safe_load(SMARTNOISE_YAML)
    change(metadata)
    with pytest.raises(dpsql.CatalogError, match=match):
        _convert(metadata)


def test_missing_file():
    with pytest.raises(dpsql.CatalogError, match="does not exist"):
        from_smartnoise("/nonexistent/PUMS.yaml")


def test_cli_writes_a_catalogue_dpsql_loads(smartnoise_file, tmp_path):
    output = tmp_path / "out" / "pums-dpsql.yaml"
    output.parent.mkdir()
    result = CliRunner().invoke(command, [str(smartnoise_file), str(output)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stdout and "table(s) PUMS.PUMS, PUMS.PUMS_pid" in result.stdout
    assert "warning: table 'PUMS.PUMS', column 'sex' is text" in result.stderr
    written = yaml.safe_load(output.read_text())
    assert written == _convert(smartnoise_file)[0]
    assert load_catalog(output).table("PUMS.PUMS_pid").privacy_unit == "pid"

    again = CliRunner().invoke(command, [str(smartnoise_file), str(output)])
    assert again.exit_code == 1 and "--force" in again.output
    forced = CliRunner().invoke(command, [str(smartnoise_file), str(output), "--force"])
    assert forced.exit_code == 0


def test_cli_bad_input_raises_the_dpsql_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("A: {s: {t: {x: {type: int, private_id: true}, y: {type: int, private_id: true}}}}\n")
    result = CliRunner().invoke(command, [str(bad), str(tmp_path / "out.yaml")])
    assert isinstance(result.exception, dpsql.CatalogError)
    assert "private_id" in str(result.exception)
    assert not (tmp_path / "out.yaml").exists()


def test_table_without_private_id_is_imported_as_public(tmp_path):
    """A table with no private_id column and no row_privacy is a public (dimension) table,
    not a reason to refuse the whole file; the warning says how to make it private."""
    metadata = yaml.safe_load(SMARTNOISE_YAML)
    metadata["PUMS"]["PUMS"]["regions"] = {"region": {"type": "int"},
                                           "name": {"type": "string"}}
    converted, messages = _convert(metadata)
    regions = converted["tables"]["PUMS.regions"]
    assert regions == {"public": True, "columns": {"region": {"type": "int"},
                                                   "name": {"type": "text"}}}
    assert any("'PUMS.regions'" in m and "public" in m and "privacy_unit" in m
               for m in messages)
    assert not any("'PUMS.regions', column 'name' is text" in m for m in messages)
    catalog = load_catalog(converted)
    assert catalog.table("PUMS.regions").public
    assert catalog.table("PUMS.PUMS_pid").privacy_unit == "pid"
    database = tmp_path / "r.duckdb"
    with duckdb.connect(str(database)) as raw:
        raw.execute("CREATE SCHEMA PUMS")
        raw.execute("CREATE TABLE PUMS.regions AS SELECT i AS region, 'r' || i AS name "
                    "FROM range(4) t(i)")
        raw.execute("CREATE TABLE PUMS.PUMS AS SELECT 1 AS age, true AS married, 'x' AS sex, "
                    "1.0 AS income")
        raw.execute("CREATE TABLE PUMS.PUMS_pid AS SELECT 1 AS pid, 1 AS age, 'x' AS educ, "
                    "1.0 AS income, TIMESTAMP '2020-01-01' AS visited, true AS married")
    converted["budget"] = {"epsilon": 10}
    with dpsql.connect(str(database), metadata=converted, ledger=":memory:",
                       insecure_seed=3) as con:
        assert con.explain("SELECT COUNT(*) FROM PUMS.regions", epsilon=1.0)[
            "total_sensitivity"] == 0
        assert con.execute("SELECT COUNT(*) FROM PUMS.regions").fetchall() == [(4,)]


def test_every_table_public_still_loads():
    converted, _ = _convert({"Shop": {"s": {"items": {"id": {"type": "int"}}}}})
    assert converted["tables"]["s.items"]["public"] is True


@pytest.mark.parametrize("collection", ["", None])
def test_catalogue_named_after_the_file_when_the_collection_has_none(tmp_path, collection):
    raw = yaml.safe_load(SMARTNOISE_YAML)
    raw[collection] = raw.pop("PUMS")
    path = tmp_path / "census-2020.yaml"
    path.write_text(yaml.safe_dump(raw))
    converted, messages = _convert(path)
    assert converted["name"] == "census-2020"
    assert load_catalog(converted).name == "census-2020"
    assert any("'census-2020' declares no privacy budget" in m for m in messages)
    assert _convert(raw)[0]["name"] == "dataset"  # a dict has no file name


def test_cli_keeps_the_collection_name(smartnoise_file, tmp_path):
    output = tmp_path / "pums-dpsql.yaml"
    result = CliRunner().invoke(command, [str(smartnoise_file), str(output)])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(output.read_text())["name"] == "PUMS"
    assert load_catalog(output).name == "PUMS"
    assert "catalogue 'PUMS'" in result.stdout


def test_sensitivity_on_a_text_column_does_not_ask_for_bounds(tmp_path):
    """The warning told the user to declare lower/upper, which a text column refuses."""
    source = tmp_path / "sn.yaml"
    source.write_text(SMARTNOISE_YAML.replace("sex: {type: string}",
                                              "sex: {type: string, sensitivity: 1}"))
    _, messages = _convert(source)
    (warning,) = [m for m in messages if "sensitivity 1 " in m]
    assert "declare them" not in warning and "a string column takes none" in warning
