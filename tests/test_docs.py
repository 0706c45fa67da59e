"""docs/metadata.md documents every metadata key; docs/errors.md every error code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

import dpsql
from dpsql import catalog, errors

ROOT = Path(__file__).resolve().parents[1]
METADATA = (ROOT / "docs" / "metadata.md").read_text()
ERRORS = (ROOT / "docs" / "errors.md").read_text()


def _functions(module) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(Path(module.__file__).read_text())
    return {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


def _string_sets(function: ast.FunctionDef) -> set[str]:
    """Strings of the set literals in a function: the keys ``set(raw) - {...}`` accepts."""
    return {element.value for node in ast.walk(function) if isinstance(node, ast.Set)
            for element in node.elts if isinstance(element, ast.Constant)}


def _looked_up(function: ast.FunctionDef) -> set[str]:
    """String keys a function reads: ``x["k"]``, ``"k" in x`` and ``x.get("k")``."""
    keys = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In) and \
                isinstance(node.left, ast.Constant):
            keys.add(node.left.value)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and \
                node.args and isinstance(node.args[0], ast.Constant):
            keys.add(node.args[0].value)
    return {k for k in keys if isinstance(k, str)}


def _accepted_keys() -> dict[str, set[str]]:
    from dpsql.backends import duckdb as duckdb_backend

    found = _functions(catalog)
    reader = _functions(duckdb_backend)
    keys = {
        "Top level": _string_sets(found["_build"]),
        "Tables": _string_sets(found["_table"]),
        "Columns": _string_sets(found["_column"]),
        "Resources": set(catalog.RESOURCE_KEYS),
        # the catalogue does not check CSV options: they are what the DuckDB reader reads
        "CSV options": _looked_up(reader["_reader"]) | _looked_up(reader["_column_sql"]),
    }
    assert all(keys.values()), keys  # the parse above still finds the keys
    return keys


def _section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/metadata.md has no '## {title}' section"
    return match.group(1)


@pytest.mark.parametrize(("section", "key"), [
    (section, key) for section, keys in _accepted_keys().items() for key in sorted(keys)])
def test_every_metadata_key_is_documented(section, key):
    assert f"| `{key}` |" in _section(METADATA, section)


def test_no_key_is_documented_that_the_code_does_not_accept():
    for section, keys in _accepted_keys().items():
        documented = set(re.findall(r"^\| `(\w+)` \|", _section(METADATA, section), re.M))
        assert documented == keys, section


def test_every_enumerated_value_is_documented():
    for value in catalog.COLUMN_TYPES + catalog.NEIGHBOURING + catalog.MECHANISMS:
        assert f"`{value}`" in METADATA


def test_metadata_examples_load():
    blocks = re.findall(r"```yaml\n(.*?)```", METADATA, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        assert catalog.load_catalog(yaml.safe_load(block)).tables


def test_private_table_defaults_are_as_documented():
    with pytest.warns(dpsql.BoundsDefaultWarning, match="dpsql tune"):
        spec = catalog.load_catalog({"tables": {"t": {"privacy_unit": "uid"}}}).table("t")
    assert (spec.max_groups_per_unit, spec.max_rows_per_group) == (1, 1)
    assert "**1 and 1**" in METADATA


def test_every_error_code_has_an_entry():
    import dpsql.sqlalchemy_dialect  # noqa: F401 - every module that could register a code

    headings = dict(re.findall(r"^### `(\w+)` — `(\w+)`$", ERRORS, re.M))
    registered = {code: cls.__name__ for code, cls in errors._BY_CODE.items()}
    assert headings == {errors.Error.code: "Error", **registered}
    for code, name in registered.items():
        assert getattr(dpsql, name) is errors.lookup(code)  # documented under its public name


def test_environment_variables_are_documented():
    sources = "\n".join(p.read_text() for p in (ROOT / "dpsql").rglob("*.py"))
    variables = set(re.findall(r"\b(DPSQL_[A-Z_]+)\b", sources))
    assert variables >= {"DPSQL_LEDGER", "DPSQL_DATASETS"}
    for variable in variables:
        assert f"`{variable}`" in METADATA or f"`{variable}`" in ERRORS, variable


def test_the_readmes_truncation_figures_are_the_shipped_datas():
    """README: 4,176 of 20,884 rows dropped (71 customers), Saturday's 4,466 counted as
    3,468, and 10,461 rows counted without a GROUP BY (8 visits a customer)."""
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    per_day = ("SELECT uid, day, COUNT(*) AS n FROM visits GROUP BY uid, day")
    with dpsql.connect_custodian(metadata=Path(__file__).parents[1] / "data" / "visits.yaml",
                                 ledger=":memory:") as con:
        (total, kept, losers), = con.execute(
            f"SELECT SUM(n), SUM(LEAST(n, 8)), COUNT(DISTINCT CASE WHEN n > 8 THEN uid END) "
            f"FROM ({per_day}) AS t").fetchall()
        (saturday, saturday_kept), = con.execute(
            f"SELECT SUM(n), SUM(LEAST(n, 8)) FROM ({per_day}) AS t WHERE day = 'Sat'"
        ).fetchall()
        (whole,), = con.execute("SELECT SUM(LEAST(n, 8)) FROM (SELECT uid, COUNT(*) AS n "
                                "FROM visits GROUP BY uid) AS t").fetchall()
    shown = f"({total - kept:,} of {total:,}; {losers} of the 2,000 customers lose"
    assert shown in readme.replace("\n", " ")
    assert f"Saturday's {saturday:,} visits count as {saturday_kept:,}" in readme.replace("\n", " ")
    assert f"counts {whole:,} of the {total:,} before noise" in readme.replace("\n", " ")


def test_server_docs_list_every_error_code_with_its_sqlstate():
    """Each code a server client can receive is in server.md's SQLSTATE table, on the row of
    its SQLSTATE (``programming`` and ``catalog`` were missing)."""
    from dpsql.server.service import ERROR_CODES
    rows = [line for line in (ROOT / "docs" / "server.md").read_text().splitlines()
            if line.startswith("| `")]
    for code, (sqlstate, _) in ERROR_CODES.items():
        assert any(f"`{code}`" in row and sqlstate in row for row in rows), code
