"""A source file's version (``versions.file_version``, which answer reuse is keyed on) changes
whenever its bytes do, even when it is rewritten in place at its size and its modification
time is set back: that kept the cached hash (keyed on path, size, mtime and inode), and a new
connection over the new rows was handed the old rows' stored answer at ε 0."""

from __future__ import annotations

import os

import dpsql
from dpsql import versions


def _rewrite_in_place(path, text: str) -> None:
    """``text`` written over the file's bytes (same inode, same size), mtime set back."""
    before = os.stat(path)
    with open(path, "r+") as handle:
        handle.write(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == \
        (before.st_ino, before.st_size, before.st_mtime_ns)


def test_a_file_rewritten_in_place_with_its_old_mtime_has_a_new_version(tmp_path, monkeypatch):
    path = tmp_path / "v.csv"
    path.write_text("uid,day\n1,Mon\n2,Mon\n")
    first = versions.file_version(path)
    _rewrite_in_place(path, "uid,day\n1,Tue\n2,Tue\n")
    assert versions.file_version(path) != first
    monkeypatch.setattr(versions, "HASHED_BYTES", 0)  # as a file past 64 MiB is versioned
    large = versions.file_version(path)
    _rewrite_in_place(path, "uid,day\n1,Wed\n2,Wed\n")
    assert versions.file_version(path) != large


def test_no_stored_answer_of_the_old_rows_for_the_new(tmp_path):
    path = tmp_path / "v.csv"
    path.write_text("uid,day\n" + "".join(f"{i},Mon\n" for i in range(300)))
    meta = {"name": "v", "budget": {"epsilon": 10}, "tables": {"v": {
        "source": str(path), "privacy_unit": "uid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1, "columns": {"uid": "int", "day": {
            "type": "text", "values": ["Mon", "Tue"]}}}}}
    sql = "SELECT day, COUNT(*) AS n FROM v GROUP BY day"
    ledger = tmp_path / "ledger.sqlite"
    with dpsql.connect(metadata=meta, ledger=ledger) as con:
        con.execute(sql, epsilon=1)
    _rewrite_in_place(path, "uid,day\n" + "".join(f"{i},Tue\n" for i in range(300)))
    with dpsql.connect(metadata=meta, ledger=ledger) as con:
        cur = con.execute(sql, epsilon=1)
        assert cur.epsilon_spent == 1  # answered afresh, not the old rows' answer


def test_no_stored_answer_of_the_rows_as_other_metadata_read_them(tmp_path):
    """The same file read by other metadata is other rows: a column declared int where it
    was text (its values NULL now), csv ``null: NA`` added (NA is NULL now). Each reused
    the earlier reading's stored answer at ε 0 (0 and 600 where 600 and 300 were true)."""
    path = tmp_path / "v.csv"
    path.write_text("uid,note\n" + "".join(f"{i},{'NA' if i % 2 else 'n'}\n" for i in range(600)))

    def meta(note: str, **csv) -> dict:
        return {"name": "v", "budget": {"epsilon": 100}, "tables": {"v": {
            "source": str(path), "privacy_unit": "uid", "max_groups_per_unit": 1,
            "max_rows_per_group": 1, "csv": csv, "columns": {"uid": "int", "note": note}}}}

    for sql, before, after in (
            ("SELECT COUNT(*) AS n FROM v WHERE note IS NULL", meta("text"), meta("int")),
            ("SELECT COUNT(note) AS n FROM v", meta("text"), meta("text", null="NA"))):
        ledger = tmp_path / f"{len(sql)}.sqlite"
        with dpsql.connect(metadata=before, ledger=ledger) as con:
            con.execute(sql, epsilon=1)
            assert con.execute(sql, epsilon=1).epsilon_spent == 0  # the same reading: reused
        with dpsql.connect(metadata=after, ledger=ledger) as con:
            assert con.execute(sql, epsilon=1).epsilon_spent == 1, sql


def test_no_stored_answer_of_rows_read_after_the_version_was_checked(tmp_path, monkeypatch):
    """An analyst's CSV is read at its first query, after the charge, but its version was
    checked before: a file replaced in that moment stored the new rows' answer under the old
    rows' version, which a later connection over the old rows got back at ε 0."""
    old = "uid,day\n" + "".join(f"{i},Mon\n" for i in range(1000))
    new = "uid,day\n" + "".join(f"{i},Mon\n" for i in range(5000))
    path = tmp_path / "v.csv"
    path.write_text(old)
    meta = {"name": "v", "budget": {"epsilon": 100}, "tables": {"v": {
        "source": str(path), "privacy_unit": "uid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1, "columns": {"uid": "int", "day": {
            "type": "text", "values": ["Mon"]}}}}}
    sql = "SELECT day, COUNT(*) AS n FROM v GROUP BY day"
    ledger = tmp_path / "ledger.sqlite"
    charge = dpsql.ledger.Ledger.charge

    def charge_then_replace(self, **kwargs):  # the data owner's export lands just then
        charged = charge(self, **kwargs)
        path.write_text(new)
        return charged

    monkeypatch.setattr(dpsql.ledger.Ledger, "charge", charge_then_replace)
    with dpsql.connect(metadata=meta, ledger=ledger) as con:
        assert con.execute(sql, epsilon=5).fetchall()[0][1] > 3000  # the new rows
    monkeypatch.setattr(dpsql.ledger.Ledger, "charge", charge)
    path.write_text(old)
    with dpsql.connect(metadata=meta, ledger=ledger) as con:
        cur = con.execute(sql, epsilon=5)
        assert cur.epsilon_spent == 5 and cur.fetchall()[0][1] < 2000
