"""Metadata validation: errors that name the table and column."""

from __future__ import annotations

import pytest

import dpsql
from dpsql.catalog import load_catalog


def _meta(**table):
    base = {"privacy_unit": None, "columns": {"x": {"type": "int", "lower": 0, "upper": 1}}}
    base.update(table)
    return {"tables": {"t": base}}


@pytest.mark.parametrize("meta,match", [
    ({"tables": {"t": {"columns": {}}}}, "neither public nor private"),
    (_meta(columns={"x": {"type": "int", "lower": 5, "upper": 1}}), "'t', column 'x'.*greater"),
    (_meta(columns={"x": {"type": "int", "lower": 5}}), "both lower and upper"),
    (_meta(columns={"x": {"type": "int", "lower": float("nan"), "upper": 1}}), "finite"),
    (_meta(columns={"x": {"type": "blob"}}), "type must be one of"),
    (_meta(columns={"x": {"type": "numeric(12,2)"}}), "type must be one of int, float"),
    (_meta(columns={"x": {"type": "text", "values": []}}), "non-empty"),
    (_meta(columns={"x": {"type": "text", "values": ["a", "a"]}}), "duplicates"),
    # tune charged its ε, then failed to read these as numbers (a ValueError, or no candidate)
    (_meta(columns={"x": {"type": "int", "values": ["a", "b"]}}), "int numbers, got 'a'"),
    (_meta(columns={"x": {"type": "int", "values": [1, 2.5]}}), "int numbers, got 2.5"),
    (_meta(columns={"x": {"type": "float", "values": [1, float("inf")]}}), "float numbers"),
    (_meta(columns={"x": {"type": "int", "values": [True, 2]}}), "int numbers, got True"),
    # math.isfinite raised a bare OverflowError on an int past the doubles
    (_meta(columns={"x": {"type": "float", "values": [1, 10**400]}}), "float numbers"),
    (_meta(columns={"x": {"type": "float", "lower": 0, "upper": 10**400}}), "finite number"),
    (_meta(columns={"x": {"type": "int", "values": [None]}}), "null, which no row equals"),
    # text values matched no bool value: randomize drew every record's value uniformly
    (_meta(columns={"x": {"type": "bool", "values": ["True", "False"]}}),
     "bool values, got 'True'"),
    (_meta(columns={"x": {"type": "bool", "values": [False, 1]}}), "bool values, got 1"),
    (_meta(columns={"x": {"type": "text", "values": ["a", None]}}), "null, which no row"),
    # read as its first ten characters: accepted as 2000-01-01
    (_meta(columns={"x": {"type": "date", "values": ["2000-01-01 garbage"]}}), "ISO date"),
    (_meta(columns={"x": {"type": "date", "lower": "2000-01-01", "upper": "2000-12-31x"}}),
     "ISO date"),
    (_meta(max_groups_per_unit=3), "row privacy"),
    (_meta(privacy_unit="u", max_rows_per_group=0), "whole number"),
    (_meta(public=True, privacy_unit="u"), "public but names"),
    (_meta(colour="red"), "unknown key"),
    ({"neighbouring": "swap", "tables": {}}, "neighbouring"),
    ({"tables": {"t": {"public": True}, "T": {"public": True}}}, "declared twice"),
    ({"budget": {"epsilon": -1}, "tables": {"t": {"public": True}}}, "budget"),
])
def test_invalid_metadata(meta, match):
    with pytest.raises(dpsql.CatalogError, match=match):
        load_catalog(meta)


def test_dataset_variable_is_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("DPSQL_DATASETS", str(tmp_path))
    cat = load_catalog({"tables": {"t": {"public": True, "source": "${DPSQL_DATASETS}/a.csv"}}})
    assert cat.table("t").source == str(tmp_path / "a.csv")


def test_privacy_unit_column_is_declared_implicitly():
    cat = load_catalog({"tables": {"t": {"privacy_unit": "uid", "max_groups_per_unit": 1,
                                         "max_rows_per_group": 1, "columns": {}}}})
    assert cat.table("t").column("UID").name == "uid"


def test_omitted_contribution_bounds_warn_once_per_table():
    with pytest.warns(dpsql.BoundsDefaultWarning) as caught:
        cat = load_catalog({"tables": {
            "a": {"privacy_unit": "uid", "max_groups_per_unit": 2},
            "b": {"privacy_unit": "uid"},
            "c": {"privacy_unit": "uid", "max_groups_per_unit": 2, "max_rows_per_group": 3},
            "d": {"privacy_unit": None}, "e": {"public": True}}})
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and "'a'" in messages[0] and "'b'" in messages[1]
    assert "max_rows_per_group: 1 is used" in messages[0] and "dpsql tune" in messages[0]
    # tuned without the queries' GROUP BY, the bounds counted every person in one group
    assert "--group-by" in messages[0] and "group_by=" in messages[0]
    assert (cat.table("b").max_groups_per_unit, cat.table("b").max_rows_per_group) == (1, 1)


def test_missing_source_file_is_a_data_error(tmp_path):
    meta = {"budget": 1, "tables": {"t": {"privacy_unit": None, "source": str(tmp_path / "no.csv"),
                                          "columns": {}}}}
    with pytest.raises(dpsql.DataError, match="does not exist"):
        dpsql.connect(metadata=meta, ledger=":memory:")


@pytest.mark.parametrize(("declared", "meant"), [("numeric(12,2)", "float"), ("DOUBLE", "float"),
                                                 ("bigint", "int"), ("varchar", "text"),
                                                 ("datetime", "timestamp")])
def test_a_type_sql_names_is_refused_with_dpsqls_name_for_it(declared, meant):
    with pytest.raises(dpsql.CatalogError) as refused:
        load_catalog(_meta(columns={"x": {"type": declared}}))
    assert refused.value.hint == f"write type: {meant}"
