"""A text column's declared values are texts (adversary round 28w): declared as 1 and "1"
(YAML reads 1 unquoted as an int), they were two cells of one SQL literal, one person's rows
counted and released in both at the sensitivity of one; a NUL or a lone surrogate failed the
statement after its charge. (A stored NOCASE collation: test_partition_harness.py.)"""

from __future__ import annotations

import datetime

import pytest

import dpsql


@pytest.mark.parametrize("values", [[1, 2, "1"], [True, "true"], ["a\x00"], ["\ud800"],
                                    ["2024-01-01", datetime.date(2024, 1, 1)]])
def test_a_text_domain_holds_texts(values):
    meta = {"name": "v", "tables": {"t": {"privacy_unit": "uid", "columns": {
        "uid": "int", "code": {"type": "text", "values": values}}}}}
    with pytest.raises(dpsql.CatalogError, match="text column"):
        dpsql.catalog.load_catalog(meta)
