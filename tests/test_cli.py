"""The dpsql command line: output, JSON contract, errors without tracebacks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import dpsql

from conftest import catalogue, require_dataset

ROOT = Path(__file__).parents[1]


def _dpsql(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "dpsql", *map(str, args)], input=stdin,
                          capture_output=True, text=True, cwd=ROOT)


def _meta(data_dir, **kw):
    path = data_dir / "meta.yaml"
    path.write_text(yaml.safe_dump(catalogue(data_dir, **kw)))
    return path


def test_run_prints_noisy_table_with_intervals(tmp_path):
    out = _dpsql("run", "queries/visits_by_day.sql", "--metadata", "data/visits.yaml",
                 "--epsilon", "1", "--ledger", tmp_path / "l.sqlite")
    assert out.returncode == 0, out.stderr
    assert "visits 95% CI" in out.stdout and "Sat" in out.stdout and "ε spent: 1" in out.stdout


def test_a_script_may_end_with_a_comment(data_dir):
    """A comment after the last ';' is no statement (sqlglot returns it as a Semicolon)."""
    script = data_dir / "commented.sql"
    script.write_text("-- visits per day\nSELECT day, COUNT(*) AS n FROM visits GROUP BY day;\n"
                      "-- the end\n/* really */\n")
    out = _dpsql("run", script, "-m", _meta(data_dir), "-e", "1", "--json")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["statements"]) == 1


def test_run_json_writes_iso_dates_and_floats_in_full(tmp_path):
    """pandas' to_json wrote dates as epoch milliseconds and floats to 10 digits."""
    (tmp_path / "stays.csv").write_text("uid,check_in,nights\n1,2024-01-03,2.5\n"
                                        "2,2024-02-11,1.25\n3,2024-02-20,7\n")
    meta = {"budget": {"epsilon": 10}, "tables": {"stays": {
        "source": str(tmp_path / "stays.csv"), "privacy_unit": "uid",
        "max_groups_per_unit": 1, "max_rows_per_group": 1,
        "columns": {"uid": "int",
                    "check_in": {"type": "date", "lower": "2024-01-01", "upper": "2024-03-31"},
                    "nights": {"type": "float", "lower": 0, "upper": 30}}}}}
    path = tmp_path / "stays.yaml"
    path.write_text(yaml.safe_dump(meta))
    sql = ("SELECT DATE_TRUNC('month', check_in) AS month, AVG(nights) AS mean "
           "FROM stays GROUP BY month")
    out = _dpsql("run", "-", "-m", path, "-e", "1", "--insecure-seed", "3", "--json",
                 "--ledger", tmp_path / "l.sqlite", stdin=sql)
    assert out.returncode == 0, out.stderr
    statement = json.loads(out.stdout)["statements"][0]
    assert statement["columns"] == ["month", "mean", "mean_low", "mean_high"]
    import dpsql

    with dpsql.connect(metadata=str(path), ledger=":memory:", insecure_seed=3) as con:
        expected = con.execute(sql, epsilon=1).intervals()
    assert [row[0] for row in statement["rows"]] == ["2024-01-01", "2024-02-01", "2024-03-01"]
    assert [row[1:] for row in statement["rows"]] == expected.iloc[:, 1:].values.tolist()


def test_explain_json_contract(data_dir):
    script = data_dir / "s.sql"
    script.write_text("SELECT sex, salary, COUNT(*) FROM adult GROUP BY sex, salary;\n"
                      "SELECT education, salary, COUNT(*) FROM adult GROUP BY education, salary;")
    out = _dpsql("explain", script, "-m", _meta(data_dir, neighbouring="replace"), "-e", "1",
                 "--json")
    plan = json.loads(out.stdout)
    assert plan["total_sensitivity"] == 4 and plan["neighbouring"] == "replace"
    assert [s["sensitivity"] for s in plan["statements"]] == [2, 2]
    assert all(s["scale"] == 4.0 for s in plan["statements"])


def test_explain_says_what_a_person_counts_with(data_dir):
    """Nothing said that bounding drops a heavy person's rows (a MovieLens COUNT(*) of
    4,703 against 100,000 with an interval of ±15): explain states the bounds and the bias."""
    meta = _meta(data_dir)
    out = _dpsql("explain", "-", "-m", meta, "-e", "1",
                 stdin="SELECT day, COUNT(*) AS n FROM visits GROUP BY day")
    assert "each person counts with at most 3 group(s) × 2 row(s)" in out.stdout, out.stdout
    assert "a bias the intervals do not cover" in out.stdout
    plan = json.loads(_dpsql("explain", "-", "-m", meta, "-e", "1", "--json",
                             stdin="SELECT COUNT(*) AS n FROM visits").stdout)
    assert plan["statements"][0]["contribution"]["max_rows_per_group"] == 2
    rows = json.loads(_dpsql("explain", "-", "-m", meta, "-e", "1", "--json",
                             stdin="SELECT COUNT(*) AS n FROM adult").stdout)
    assert "contribution" not in rows["statements"][0]  # row privacy: a row is a person


def test_explain_text_shows_shared_parts_and_quantiles(data_dir):
    script = data_dir / "s.sql"
    script.write_text("SELECT day, COUNT(amount) AS n FROM visits GROUP BY day;\n"
                      "SELECT day, AVG(amount) AS a, MEDIAN(amount) AS m FROM visits "
                      "GROUP BY day;")
    out = _dpsql("explain", script, "-m", _meta(data_dir), "-e", "1")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if "AMOUNT)" in line.upper()
             and "Δ=" in line]
    assert len(lines) == 4
    assert "(shown from statement 1, p0: no ε)  (ℓ∞)" in lines[2]
    assert "95% rank error ±" in lines[3] and "rows" in lines[3]
    # the count and the average's sum read the same rows alike: one ℓ∞ draw for the two
    # (the second statement shows the count, so it names no other statement's member)
    assert out.stdout.count("(ℓ∞): drawn with") == 1
    assert "(ℓ∞): drawn with statement 2, p0\n" in out.stdout


def test_explain_text_names_each_block_of_a_statement(data_dir):
    """COUNT(*) and nine sums: two ℓ∞ blocks, each part marked with its own and each block
    described with its size and ε (the two add up to the statement's)."""
    sums = ", ".join(f"SUM(amount * {k}) AS s{k}" for k in range(1, 10))
    out = _dpsql("explain", "-", "-m", _meta(data_dir), "-e", "1",
                 stdin=f"SELECT day, COUNT(*) AS n, {sums} FROM visits GROUP BY day")
    assert out.returncode == 0, out.stderr
    marks = re.findall(r"Δ=.*\((ℓ∞ \d)\)$", out.stdout, re.MULTILINE)
    footers = re.findall(r"\((ℓ∞ \d)\): one joint draw per group of (\d) measurements at ε "
                         r"([0-9.]+) in all", out.stdout)
    assert len(marks) == 10 and sorted(set(marks)) == ["ℓ∞ 1", "ℓ∞ 2"]
    assert sorted((label, int(size)) for label, size, _ in footers) == \
        sorted((label, marks.count(label)) for label in set(marks))
    assert sum(float(e) for _, _, e in footers) == pytest.approx(1, abs=1e-3)


def test_bounding_snapshot_on_the_command_line(tmp_path):
    args = ["queries/visits_by_day.sql", "--metadata", "data/visits.yaml", "--epsilon", "1",
            "--ledger", tmp_path / "l.sqlite", "--bounding", "snapshot"]
    plan = json.loads(_dpsql("explain", *args, "--json").stdout)
    # COUNT(DISTINCT uid) counts persons, so this script is bounded per query
    assert [s["bounding"] for s in plan["statements"]] == ["per_query"]
    plan = json.loads(_dpsql("explain", "queries/visits_weekend_members.sql", *args[1:],
                             "--json").stdout)
    assert {s["bounding"] for s in plan["statements"]} == {"snapshot"}
    out = _dpsql("run", "queries/visits_weekend_members.sql", *args[1:])
    assert out.returncode == 0, out.stderr
    assert "ε spent: 1" in out.stdout
    out = _dpsql("run", *args[:-1], "cached")
    assert out.returncode == 2 and "per_query" in out.stderr


def test_errors_go_to_stderr_without_traceback(data_dir):
    meta = _meta(data_dir)
    out = _dpsql("run", "-", "-m", meta, "-e", "1", stdin="SELECT age FROM adult")
    assert out.returncode == 1 and out.stdout == ""
    assert "Error:" in out.stderr and "Traceback" not in out.stderr
    out = _dpsql("run", "-", "-m", meta, "-e", "1", "--json", stdin="SELEC 1")
    payload = json.loads(out.stderr)
    assert payload["ok"] is False and payload["code"] == "syntax"
    assert payload["epsilon_spent"] == 0
    out = _dpsql("run", "missing.sql", "-m", meta, "-e", "1")
    assert out.returncode == 1 and "does not exist" in out.stderr
    # SQL given where the script's path goes, longer than a file name may be
    statement = "SELECT sex, " + ", ".join(f"SUM(hours * {k})" for k in range(40)) + \
        " FROM adult GROUP BY sex"
    for command in ("run", "explain"):
        out = _dpsql(command, statement, "-m", meta, "-e", "1")
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert "does not exist" in out.stderr and "stdin" in out.stderr


def test_warnings_are_one_line_each_on_stderr(data_dir):
    """Python's format printed the library's file, line and source line under each warning
    (`dpsql/connection.py:41: BoundsDefaultWarning: ...` then `self.catalog: Catalog = ...`)."""
    out = _dpsql("run", "-", "-m", _meta(data_dir), "-e", "1",
                 stdin="SELECT COUNT(*) AS n FROM adult WHERE sex = 'male'")
    assert out.returncode == 0, out.stderr
    warned = [line for line in out.stderr.splitlines() if line]
    assert len(warned) == 1 and warned[0].startswith("Warning: no declared value of sex"), \
        out.stderr


def test_budget_command(data_dir):
    meta = _meta(data_dir, budget=2.0)
    ledger = data_dir / "b.sqlite"
    _dpsql("run", "-", "-m", meta, "-e", "0.5", "--ledger", ledger,
           stdin="SELECT COUNT(*) FROM adult")
    out = _dpsql("budget", "-m", meta, "--ledger", ledger, "--json")
    info = json.loads(out.stdout)
    assert info["spent_epsilon"] == 0.5 and info["remaining_epsilon"] == 1.5
    assert "releases" not in info  # only with --history, where ε and δ are numbers too
    out = _dpsql("budget", "-m", meta, "--ledger", ledger, "--json", "--history")
    (release,) = json.loads(out.stdout)["releases"]
    assert release["epsilon"] == 0.5 and release["delta"] == 0  # not "1/2"
    text = _dpsql("budget", "-m", meta, "--ledger", ledger).stdout
    assert "budget    ε=2, δ=1e-06" in text and "remaining ε=1.5, δ=1e-06" in text
    unbudgeted = yaml.safe_load(meta.read_text())
    del unbudgeted["budget"]
    meta.write_text(yaml.safe_dump(unbudgeted))
    text = _dpsql("budget", "-m", meta, "--ledger", ledger).stdout
    assert "ε=None" not in text and "budget    none: every query" in text


def test_run_shows_three_digits_of_a_value_below_one(data_dir):
    """Two decimals printed a share as 0.11 [0.11, 0.11]: its noise was invisible."""
    out = _dpsql("run", "-", "-m", _meta(data_dir), "-e", "1", "--ledger",
                 data_dir / "s.sqlite", stdin="SELECT AVG(CASE WHEN amount > 50 THEN 1.0 "
                 "ELSE 0.0 END) AS share FROM visits")
    assert out.returncode == 0, out.stderr
    assert re.search(r"0\.\d{3} +\[0\.\d{3}, 0\.\d{3}\]", out.stdout), out.stdout


def test_run_shows_no_interval_for_a_quantile_but_its_rank_error(data_dir):
    """The dash in a quantile's interval column was all a reader saw: explain alone gave its
    rank error; the description carries it too."""
    sql = "SELECT MEDIAN(amount) AS m, COUNT(*) AS n FROM visits"
    out = _dpsql("run", "-", "-m", _meta(data_dir), "-e", "1", "--ledger", data_dir / "q.sqlite",
                 stdin=sql)
    assert out.returncode == 0, out.stderr
    assert "NULL" not in out.stdout and "—" in out.stdout
    with dpsql.connect(metadata=_meta(data_dir), ledger=":memory:") as con:
        error = con.explain(sql)["statements"][0]["aggregates"][0]["rank_error_95"]
        assert [c.rank_error for c in con.describe(sql)] == [error, None]
    assert f"m: a DP quantile, its rank within ±{error:,.0f} rows" in out.stdout


def test_run_without_epsilon_gives_the_command_line_hint(data_dir):
    out = _dpsql("run", "-", "-m", _meta(data_dir), "--json", "--ledger", data_dir / "e.sqlite",
                 stdin="SELECT COUNT(*) FROM adult")
    assert out.returncode == 1
    payload = json.loads(out.stderr)
    assert payload["code"] == "bad_privacy_parameter" and payload["epsilon_spent"] == 0
    assert "--epsilon E" in payload["hint"] and "execute()" not in payload["hint"]


def test_delta_on_run_and_explain(data_dir):
    meta = yaml.safe_load(_meta(data_dir).read_text())
    meta["tables"]["visits"]["columns"]["shop"] = {"type": "text"}  # a private key
    (data_dir / "visits.csv").write_text(
        "uid,day,amount,region_id,shop\n" + "".join(
            f"{i},Mon,1.0,0,{'corner' if i % 2 else 'market'}\n" for i in range(400)))
    path = data_dir / "meta-shop.yaml"
    path.write_text(yaml.safe_dump(meta))
    sql = "SELECT shop, COUNT(*) AS n FROM visits GROUP BY shop"
    ledger = data_dir / "d.sqlite"
    refused = _dpsql("explain", "-", "-m", path, "-e", "1", "--json", stdin=sql)
    assert refused.returncode == 1 and json.loads(refused.stderr)["code"] == "private_keys"
    plan = json.loads(_dpsql("explain", "-", "-m", path, "-e", "1", "--delta", "1e-6",
                             "--json", stdin=sql).stdout)
    assert plan["delta"] == 1e-6 and plan["total_sensitivity"] == 9  # count L0·L∞ 6 + τ count L0 3
    out = _dpsql("run", "-", "-m", path, "-e", "1", "--delta", "1e-6", "--ledger", ledger,
                 "--json", "--insecure-seed", "3", stdin=sql)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ok"] is True


def test_dialect_on_run_and_explain(data_dir):
    """--dialect reads the script with that dialect (BigQuery backticks, T-SQL TOP)."""
    meta = _meta(data_dir)
    bigquery = "SELECT `sex`, COUNTIF(age > 40) AS n FROM `adult` GROUP BY `sex`"
    plan = _dpsql("explain", "-", "-m", meta, "-e", "1", "--dialect", "bigquery", "--json",
                  stdin=bigquery)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["total_sensitivity"] == 1
    out = _dpsql("run", "-", "-m", meta, "-e", "1", "--dialect", "tsql", "--json",
                 "--ledger", data_dir / "t.sqlite",
                 stdin="SELECT TOP 3 [education], COUNT(*) AS n FROM adult GROUP BY [education]"
                       " ORDER BY n DESC")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["statements"][0]["rows"]) == 3
    unknown = _dpsql("explain", "-", "-m", meta, "-e", "1", "--dialect", "klingon",
                     stdin="SELECT COUNT(*) FROM adult")
    assert unknown.returncode in (1, 2) and "klingon" in unknown.stderr


def test_memory_limit_and_temp_directory_on_run(data_dir, tmp_path):
    meta = _meta(data_dir)
    sql = "SELECT day, COUNT(*) FROM visits GROUP BY day"
    spill = tmp_path / "spill"
    out = _dpsql("run", "-", "-m", meta, "-e", "1", "--memory-limit", "300MB",
                 "--temp-directory", spill, stdin=sql)
    assert out.returncode == 0, out.stderr
    assert spill.is_dir() and not any(spill.iterdir())  # the connection's folder is gone
    out = _dpsql("run", "-", "-m", meta, "-e", "1", "--memory-limit", "lots", stdin=sql)
    assert out.returncode == 1 and "memory_limit must be a size such as 4GB" in out.stderr


def test_run_tunes_its_bounds_inside_its_epsilon(tmp_path):
    """--tune 0.1 of --epsilon 1: two ledger rows adding up to 1; a script of two statements
    is refused before anything is charged."""
    import sqlite3
    from fractions import Fraction

    ledger = tmp_path / "l.sqlite"
    sql = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"
    out = _dpsql("run", "-", "-m", "data/visits.yaml", "-e", "1", "--tune", "0.1",
                 "--ledger", ledger, stdin=sql)
    assert out.returncode == 0, out.stderr
    assert "n 95% CI" in out.stdout and "ε spent: 1; remaining: 9" in out.stdout
    # the bounds it chose were not shown, though they decide what the answer counts
    assert re.search(r"bounds chosen by --tune: max_groups_per_unit \d+, max_rows_per_group "
                     r"\d+", out.stdout), out.stdout
    with sqlite3.connect(ledger) as db:
        charged = sorted(Fraction(e) for (e,) in db.execute("SELECT epsilon FROM releases"))
    assert charged == [Fraction(1, 10), Fraction(9, 10)]
    out = _dpsql("run", "-", "-m", "data/visits.yaml", "-e", "1", "--tune", "0.1",
                 "--ledger", ledger, stdin=f"{sql}; {sql}")
    assert out.returncode == 1 and "one statement" in out.stderr
    with sqlite3.connect(ledger) as db:
        assert db.execute("SELECT COUNT(*) FROM releases").fetchone() == (2,)


def _invoke(monkeypatch, *args):
    """``dpsql ARGS`` in process (the CLI reads --json from the command line it was given)."""
    from click.testing import CliRunner

    from dpsql.cli import main

    args = list(map(str, args))
    monkeypatch.setattr(sys, "argv", ["dpsql", *args])
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize("args", [
    ["tune", "--table", "visits", "-e", "0.1"],
    ["evaluate", "tree", "-t", "visits", "--class", "day"],
    ["evaluate", "attribute-selection", "-t", "visits", "--class", "day", "-e", "1"],
    ["evaluate", "naive-bayes", "-t", "visits", "--class", "day"],
    ["evaluate", "anonymize", "-t", "visits"],
    ["evaluate", "cf"],
    ["randomize", "--table", "visits", "--output", "x.csv"],
    ["run", "queries/visits_by_day.sql", "-e", "1"],
])
def test_a_missing_metadata_file_is_a_coded_error_on_every_command(monkeypatch, tmp_path, args):
    """click.Path(exists=True) made it a usage error: exit code 2 and no JSON."""
    result = _invoke(monkeypatch, *args, "-m", tmp_path / "nope.yaml", "--json")
    assert result.exit_code == 1, result.output
    error = json.loads(result.stderr)
    assert error["code"] == "catalog" and "nope.yaml' does not exist" in error["error"]
    assert error["hint"] == "pass --metadata with the path of a YAML catalogue"


def test_missing_input_files_are_coded_errors(monkeypatch, tmp_path):
    randomize = _invoke(monkeypatch, "randomize", "-m", "data/visits.yaml", "--table", "visits",
                        "--output", tmp_path / "x.csv", "--input", tmp_path / "no.csv", "--json")
    smartnoise = _invoke(monkeypatch, "import-smartnoise", tmp_path / "no.yaml",
                         tmp_path / "out.yaml")
    assert randomize.exit_code == smartnoise.exit_code == 1
    assert json.loads(randomize.stderr)["code"] == "interface"
    assert "input file" in randomize.stderr and "SmartNoise metadata file" in smartnoise.stderr


def test_randomize_says_which_parameter_is_missing(monkeypatch, tmp_path):
    common = ["randomize", "-m", "data/visits.yaml", "--table", "visits", "--output",
              tmp_path / "x.csv"]
    warner = _invoke(monkeypatch, *common, "--mechanism", "warner")
    assert warner.exit_code == 1 and "--mechanism warner needs --theta" in warner.stderr
    assert "--p0" not in warner.stderr
    theta = _invoke(monkeypatch, *common, "--theta", "0.7")
    assert theta.exit_code == 1 and "add --mechanism warner" in theta.stderr


def test_randomize_refuses_to_publish_the_true_values(monkeypatch, tmp_path):
    """p0 = 1 wrote the exact table as a public one (local ε infinite), silently."""
    require_dataset("car.csv")
    output = tmp_path / "car_rr.csv"
    result = _invoke(monkeypatch, "randomize", "-m", "data/datasets/car.yaml", "--table", "car",
                     "--output", output, "--p0", "1", "--json")
    assert result.exit_code == 1, result.output
    error = json.loads(result.stderr)
    assert error["code"] == "bad_privacy_parameter" and "infinite local ε" in error["error"]
    assert "--keep" in error["hint"] and not output.exists()


def test_a_refused_tune_is_hinted_relative_to_the_statements_epsilon(monkeypatch, tmp_path):
    """--tune 0 at -e 0.05 hinted "e.g. tune=1.0", which is then refused at that ε."""
    result = _invoke(monkeypatch, "run", "queries/visits_by_day.sql", "-m", "data/visits.yaml",
                     "-e", "0.05", "--tune", "0", "--ledger", tmp_path / "l.sqlite", "--json")
    assert result.exit_code == 1, result.output
    error = json.loads(result.stderr)
    assert error["code"] == "bad_privacy_parameter" and "e.g. --tune 0.005" in error["hint"]


def test_hints_name_the_command_lines_flags(tmp_path):
    """The API's hints printed "e.g. epsilon=1.0" and "delta=1e-6" where the flags are
    --epsilon and --delta; an OPTIONS(...) clause in a hint is SQL and stays as written."""
    def hint(sql, *args):
        script = tmp_path / "q.sql"
        script.write_text(sql)
        out = _dpsql("run", script, "--metadata", "data/visits.yaml", "--ledger",
                     tmp_path / "l.sqlite", "--json", *args)
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        return json.loads(out.stderr)["hint"]

    keys = "SELECT amount, COUNT(*) AS n FROM visits GROUP BY amount"
    assert "(e.g. --delta 1e-6, or SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(delta=1e-6)" in \
        hint(keys, "--epsilon", "1")
    assert "e.g. --epsilon 1.0" in hint("SELECT COUNT(*) AS n FROM visits", "--epsilon", "0")
    hinted = hint("/* dpsql: ci95 <= 50 */ " + keys.replace("amount", "day"), "--epsilon", "1")
    assert hinted.startswith("drop --epsilon (or the clause's OPTIONS(epsilon=...))")


def test_a_warnings_python_example_stays_python(tmp_path):
    """The default-bounds warning's "(Python: con.tune('t', epsilon=0.5))" was printed as
    "con.tune('t', --epsilon 0.5)", which is neither Python nor a command line."""
    meta = tmp_path / "m.yaml"
    meta.write_text("tables:\n  visits:\n    source: " + str(Path("data/visits.csv").resolve())
                    + "\n    privacy_unit: uid\n    columns: {uid: int}\n")
    out = _dpsql("budget", "--metadata", meta, "--ledger", tmp_path / "l.sqlite")
    assert out.returncode == 0, out.stderr
    assert "con.tune('visits', group_by=[...], epsilon=0.5)" in out.stderr, out.stderr


def test_run_shows_keys_as_written(data_dir):
    """Keys went through the values' format: a year read 1,997 and a decade 10.00."""
    sql = ("SELECT (FLOOR(age / 10) * 10) AS decade, age * 100 + 1000 AS code, COUNT(*) AS n "
           "FROM adult WHERE age < 19 GROUP BY decade, code")
    out = _dpsql("run", "-", "-m", _meta(data_dir), "-e", "1", "--ledger", data_dir / "k.sqlite",
                 stdin=sql)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:3]]
    assert [row[:2] for row in rows] == [["10", "2700"], ["10", "2800"]], out.stdout


def test_run_says_what_a_person_counts_with(tmp_path):
    """Only explain said that rows beyond the bounds are dropped: MovieLens' old 20 groups of 1
    row released COUNT(*) as 938 ± 19 of 100,000 ratings, and run said nothing."""
    out = _dpsql("run", "queries/visits_by_day.sql", "--metadata", "data/visits.yaml",
                 "--epsilon", "1", "--ledger", tmp_path / "l.sqlite")
    assert out.returncode == 0, out.stderr
    assert "each person counts with at most 7 group(s) × 8 row(s): rows beyond are dropped" \
        in out.stdout, out.stdout


def test_explain_shows_a_quantiles_histogram_query(data_dir):
    """A statement of quantiles alone showed its placeholder 'SELECT 1 AS __one' as its SQL;
    the histogram each quantile reads is what runs."""
    out = _dpsql("explain", "-", "-m", _meta(data_dir), "-e", "1",
                 stdin="SELECT MEDIAN(amount) AS m FROM visits")
    assert out.returncode == 0, out.stderr
    assert "__one" not in out.stdout and "histogram of MEDIAN(amount):" in out.stdout, out.stdout


def test_run_says_an_answer_is_an_earlier_releases_stored_one(tmp_path):
    """A repeated script printed "ε spent: 0" alone, as though nothing had been asked."""
    def run(*extra):
        out = _dpsql("run", "queries/visits_by_day.sql", "--metadata", "data/visits.yaml",
                     "--epsilon", "1", "--ledger", tmp_path / "l.sqlite", *extra)
        assert out.returncode == 0, out.stderr
        return out.stdout

    first = run()
    assert "ε spent: 1;" in first and "stored answer" not in first
    assert "ε spent: 0 (the stored answer of an identical earlier release" in run()
    assert json.loads(run("--json"))["reused"] is True


def test_a_usage_error_under_json_is_json(tmp_path):
    """A bad flag printed click's plain text even with --json, where every other error is a
    JSON object on stderr."""
    out = _dpsql("run", "queries/visits_by_day.sql", "--metadata", "data/visits.yaml",
                 "--epsilon", "one", "--json")
    assert out.returncode == 2, out.stderr
    error = json.loads(out.stderr)
    assert error["code"] == "usage" and "--epsilon" in error["error"] and error["hint"]
    plain = _dpsql("run", "queries/visits_by_day.sql", "--metadata", "data/visits.yaml",
                   "--epsilon", "one")
    assert plain.returncode == 2 and plain.stderr.startswith("Usage:"), plain.stderr
