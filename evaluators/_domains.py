"""Matching an evaluator's values to a public domain value by value, never through column text.

pandas formats a column's text from all its values: one NULL among ints made every value
'1.0', one timestamp past midnight wrote every date in full, and such a column matched no
declared value compared as text. Each value is matched by itself instead
(``dpsql.randomize.domain_codes``, as randomize matches them), else by a domain value's label.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dpsql.randomize import domain_codes


def value_codes(values: pd.Series | Sequence, domain: Sequence) -> np.ndarray:
    """Each value's index in ``domain``, -1 for a missing value or one outside it: matched by
    value (``domain_codes``), else by a domain value's label (``str``), so a frame of values
    and one of labels (``encode_frame``'s '1' for a declared 1) read alike.

    Example:
        >>> value_codes(pd.Series([2.0, "1", None, 7]), [1, 2]).tolist()
        [1, 0, -1, -1]
    """
    values = values if isinstance(values, pd.Series) else pd.Series(list(values), dtype=object)
    codes = domain_codes(values, domain)
    unmatched = codes < 0
    if unmatched.any():
        codes[unmatched] = domain_codes(values[unmatched], [str(v) for v in domain])
    return codes


def domain_labels(values: pd.Series, domain: Sequence,
                  labels: Sequence[str] | None = None) -> pd.Series:
    """Each value's label: that of its entry in ``domain`` (``value_codes``), None for a
    missing value or one outside the domain.

    Args:
        labels: the label of each domain value, in its order (default: its text, ``str``, as
            classes are named).

    Example:
        >>> domain_labels(pd.Series([0.0, None, 1.0]), [0, 1]).tolist()
        ['0', None, '1']
    """
    named = [str(v) for v in domain] if labels is None else list(labels)
    codes = value_codes(values, domain)
    table = np.asarray([*named, None], dtype=object)  # code -1 reads the appended None
    return pd.Series(table[codes], index=values.index, dtype=object)
