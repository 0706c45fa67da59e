"""``EXPLAIN [(options)] <select>`` on the wire: dpsql's DP plan of the statement, never run
and never charged (``Service.explain`` plans it; the engine's explain reads no private data,
only public tables' values for their domains).

As PostgreSQL's, the plan is text rows by default and with ``FORMAT TEXT`` (the lines
``dpsql explain`` prints: ``explain_text.py``), one JSON value with ``FORMAT JSON`` (what the
Python client reads).
``ANALYZE`` is refused: it would run the statement on the private data and show its exact
row counts, which only a release may show, noised and charged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dpsql.server.service import ServiceError

_EXPLAIN = re.compile(r"^explain\b\s*(.*)$", re.IGNORECASE | re.DOTALL)
_OPTIONS = re.compile(r"^\(([^()]*)\)\s*(.*)$", re.DOTALL)
_LEGACY = re.compile(r"^((?:(?:analy[sz]e|verbose)\s+)*)(.*)$", re.IGNORECASE | re.DOTALL)
_TRUE, _FALSE = {"", "true", "on", "1"}, {"false", "off", "0"}
# PostgreSQL's options besides ANALYZE and FORMAT: they change what its plan shows, and
# dpsql's has none of what they show (costs, buffers, timings), so they change nothing here
_IGNORED = {"verbose", "costs", "settings", "generic_plan", "buffers", "wal", "timing",
            "summary"}
_HINT = "EXPLAIN SELECT ... shows the DP plan (ε, noise, expected error) and spends nothing"


@dataclass(frozen=True)
class Explain:
    """An EXPLAIN: the statement it explains, and whether as JSON."""

    query: str
    json: bool = False


def parse(text: str) -> Explain | None:
    """The EXPLAIN ``text`` asks for; None when it is not one, refused (``not_supported``)
    for ANALYZE and formats other than TEXT and JSON."""
    match = _EXPLAIN.match(text)
    if match is None:
        return None
    rest = match.group(1)
    options = _OPTIONS.match(rest)
    if options is None:  # EXPLAIN [ANALYZE] [VERBOSE] statement
        legacy = _LEGACY.match(rest)
        if "analy" in legacy.group(1).lower():
            raise _analyze()
        return Explain(legacy.group(2).strip())
    as_json = False
    for option in filter(None, (item.strip() for item in options.group(1).split(","))):
        name, _, value = option.partition(" ")
        name, value = name.lower(), value.strip().strip("'\"").lower()
        if name in ("analyze", "analyse") and value in _TRUE:
            raise _analyze()
        if name == "format" and value in ("text", "json"):
            as_json = value == "json"
        elif not (name in _IGNORED | {"analyze", "analyse"} and value in _TRUE | _FALSE):
            raise ServiceError("not_supported", f"EXPLAIN option {option[:40]!r} is not "
                               "offered: dpsql's plan is FORMAT TEXT or FORMAT JSON",
                               hint=_HINT + "; EXPLAIN (FORMAT JSON) SELECT ... as JSON")
    return Explain(options.group(2).strip(), as_json)


def _analyze() -> ServiceError:
    return ServiceError(
        "not_supported", "EXPLAIN ANALYZE is not offered: it would run the statement on the "
        "private data and show its exact row counts, which only a release shows (noised and "
        "charged)", hint=_HINT + "; run the SELECT itself for its answer")
