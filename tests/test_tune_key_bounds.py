"""tune and tune= for a GROUP BY a ``key_bounds`` entry governs (docs/metadata.md): the
proposal is that entry's L0 and L∞, written as the table's ``key_bounds``, and the table's
bounds, which every other statement uses, stay as declared."""

from __future__ import annotations

import numpy as np
import pandas as pd
import yaml
from click.testing import CliRunner

import dpsql
from dpsql.tune import command

ITEMS = 400
ITEM_ENTRY = {"columns": ["item"], "max_groups_per_unit": 200, "max_rows_per_group": 1}
PAIR_ENTRY = {"columns": ["item", "rating"], "max_groups_per_unit": 4, "max_rows_per_group": 2}


def ratings_metadata(folder, people: int = 2000, **table) -> dict:
    """2,000 persons who each rate 1 to 20 distinct items once (as the item entry declares),
    under the table's 5 × 100 (MovieLens' shape before its 8 × 300 with 300 rows in all);
    ``table`` overrides keys of the table."""
    rng = np.random.default_rng(11)
    rows = [(u, int(item), int(rng.integers(1, 6))) for u in range(people)
            for item in rng.choice(np.arange(1, ITEMS + 1), rng.integers(1, 21), replace=False)]
    pd.DataFrame(rows, columns=["uid", "item", "rating"]).to_csv(folder / "ratings.csv",
                                                                  index=False)
    spec = {"source": str(folder / "ratings.csv"), "privacy_unit": "uid",
            "max_groups_per_unit": 5, "max_rows_per_group": 100,
            "key_bounds": [ITEM_ENTRY, PAIR_ENTRY],
            "columns": {"uid": "int", "item": {"type": "int", "lower": 1, "upper": ITEMS},
                        "rating": {"type": "int", "lower": 1, "upper": 5}}}
    return {"name": "ratings", "budget": {"epsilon": 100}, "tables": {"ratings": spec | table}}


def test_a_shape_an_entry_governs_is_proposed_as_that_entry(tmp_path):
    """s19: dpsql tune --group-by item proposed max_groups_per_unit/max_rows_per_group for the
    whole table (13 × 1 on MovieLens), which would have replaced every other statement's
    5 × 100, and only a note said to write it as the entry. Now the snippet is the table's
    key_bounds, the item entry's L0 and L∞ proposed (one rating a person-item: L∞ 1), the
    other entry as declared; a GROUP BY no entry governs is still proposed for the table."""
    meta = ratings_metadata(tmp_path)
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=3) as con:
        item = con.tune("ratings", epsilon=2, group_by=["item"], columns=[])
        rating = con.tune("ratings", epsilon=2, group_by=["rating"], columns=[])
    assert item.entry == ("item",)
    snippet = item.metadata["tables"]["ratings"]
    [proposed, other] = snippet.pop("key_bounds")
    assert snippet == {}  # nothing for the table itself
    assert proposed["columns"] == ["item"] and other == PAIR_ENTRY
    assert proposed["max_rows_per_group"] == 1 and proposed["max_groups_per_unit"] <= 20
    assert item.bounds == {key: proposed[key] for key in
                           ("max_groups_per_unit", "max_rows_per_group")}
    assert rating.entry is None and "key_bounds" not in rating.metadata["tables"]["ratings"]
    assert "max_groups_per_unit" in rating.metadata["tables"]["ratings"]


def test_the_cli_prints_the_entry_to_write(tmp_path):
    """The YAML dpsql tune prints for GROUP BY item is the key_bounds list to write."""
    meta = tmp_path / "meta.yaml"
    meta.write_text(yaml.safe_dump(ratings_metadata(tmp_path)))
    out = CliRunner().invoke(command, ["--metadata", str(meta), "--table", "ratings",
                                       "--epsilon", "2", "--group-by", "item",
                                       "--ledger", str(tmp_path / "l.sqlite")])
    assert out.exit_code == 0, out.output
    assert "#   key_bounds entry of item: max_groups_per_unit =" in out.output
    snippet = yaml.safe_load(out.output[out.output.index("tables:"):])
    assert set(snippet["tables"]["ratings"]) == {"key_bounds"}


def test_tune_answers_under_the_entry_it_proposes_and_keeps_the_tables_r(tmp_path):
    """tune= answered GROUP BY item under table bounds it wrote over the entry (dropping the
    table's declared R); it now answers under the entry it proposed, as dpsql tune writes it,
    with the table's R still capping a person's rows."""
    meta = ratings_metadata(tmp_path, max_rows_per_unit=30)
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=5) as con:
        cursor = con.execute("SELECT item, COUNT(*) AS n FROM ratings GROUP BY item",
                             epsilon=2, tune=0.5)
        chosen = cursor.tuned_bounds
        declared = con.catalog.table("ratings").key_bounds[0]
    assert set(chosen) == {"max_groups_per_unit", "max_rows_per_group"}
    l0, linf = chosen["max_groups_per_unit"], chosen["max_rows_per_group"]
    # the entry's tuned bounds, which the note does not say the metadata declares (it said
    # "whose key_bounds entry declares L0 = 15" where the metadata declares 200)
    assert any(f"key_bounds entry gives L0 = {l0} and L∞ = {linf}" in note
               for note in cursor.notes), cursor.notes
    assert any("30 rows in all" in note for note in cursor.notes), cursor.notes
    assert declared.max_groups_per_unit == 200  # the connection's metadata is as declared
