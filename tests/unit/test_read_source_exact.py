"""Adversary round S: a custodian's read keeps an int column's values exact beside a NULL."""
import dpsql
from dpsql.randomize import RandomizationSpec, randomize_table, read_source

BASE = 2**60  # 64-bit ids: floats 256 apart here


def _metadata(path):
    return {"name": "u", "tables": {"u": {
        "source": str(path), "privacy_unit": "uid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1,
        "columns": {"uid": {"type": "int"}, "c": {"type": "text", "values": ["a", "b"]}}}}}


def test_read_source_keeps_ints_past_2_53_beside_a_null(tmp_path):
    """One person's NULL made every int a float: ids past 2^53 rounded, people merged."""
    path = tmp_path / "u.csv"
    path.write_text("uid,c\n" + "".join(f"{BASE + i},a\n" for i in range(3)) + ",b\n")
    frame = read_source(_metadata(path), "u", ledger=":memory:")
    assert frame["uid"].iloc[:3].tolist() == [BASE, BASE + 1, BASE + 2]


def test_randomize_publishes_every_person_beside_a_null_id(tmp_path):
    """A row without a person made 300 people 2 (bound_units kept one record of each merge)."""
    path = tmp_path / "u.csv"
    path.write_text("uid,c\n" + "".join(f"{BASE + i},a\n" for i in range(300)) + ",b\n")
    result = randomize_table(_metadata(path), "u", tmp_path / "out.parquet",
                             RandomizationSpec(p=0.5), rng=dpsql.RandomSource(insecure_seed=1),
                             ledger=":memory:")
    assert (result.rows, result.rows_dropped) == (300, 1)
