"""``COPY (SELECT ...) TO STDOUT``: what psql's ``\\copy (SELECT ...) TO 'file' CSV HEADER``
sends, read and written here.

The query inside the parentheses is one release as the same SELECT sent alone (the wire
server gives it to the service: the same compile, charge and answer reuse); only its answer
is written otherwise, as lines of PostgreSQL's text or CSV format, with a header line of the
column names when asked. Any other COPY (of a table, from a client, to a server file, binary,
other delimiters or quotes) is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dpsql.server.service import ServiceError
from dpsql.sqltext import spans

_COPY = re.compile(r"^copy\b", re.IGNORECASE)
_TO_STDOUT = re.compile(r"^\s*to\s+stdout\b(.*)$", re.IGNORECASE | re.DOTALL)
_TRUE, _FALSE = {"", "true", "on", "1"}, {"false", "off", "0"}
# PostgreSQL's text format: these characters as backslash escapes, NULL as \N
_ESCAPES = str.maketrans({"\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                          "\t": "\\t", "\v": "\\v"})
_HINT = ("dpsql's COPY is COPY (SELECT ...) TO STDOUT [WITH (FORMAT csv, HEADER)], as psql's "
         "\\copy (SELECT ...) TO 'file' CSV HEADER sends it; or \\pset format csv and \\o file "
         "before the SELECT, or psql --csv -c 'SELECT ...' > file")


@dataclass(frozen=True)
class Copy:
    """A ``COPY (query) TO STDOUT``: its query, and how its answer is written."""

    query: str
    csv: bool = False
    header: bool = False


def parse(text: str) -> Copy | None:
    """The COPY ``text`` asks for; None when it is not a COPY, refused (``not_supported``)
    when it is one dpsql does not write."""
    if not _COPY.match(text):
        return None
    opening = text.find("(")
    closing = None if opening < 0 or text[4:opening].strip() else _closing(text, opening)
    if closing is None:
        raise _refused("COPY runs on the answer of a query in parentheses, never on a "
                       "table (its rows, or rows into it)")
    match = _TO_STDOUT.match(text[closing + 1:])
    if match is None:
        raise _refused("COPY writes to STDOUT only (the client's side), not from a client "
                       "or to a file of the server")
    csv, header = _options(match.group(1).strip().rstrip(";").strip())
    return Copy(text[opening + 1:closing].strip(), csv, header)


def _closing(text: str, opening: int) -> int | None:
    """Where the parenthesis opened at ``opening`` closes, in code (not in a string,
    quoted name or comment); None when it does not."""
    depth, position = 0, 0
    for piece, code in spans(text):
        for offset, char in enumerate(piece if code else ""):
            if position + offset < opening or char not in "()":
                continue
            depth += 1 if char == "(" else -1
            if depth == 0:
                return position + offset
        position += len(piece)
    return None


def _options(text: str) -> tuple[bool, bool]:
    """(csv, header) of COPY's options: ``[WITH] (FORMAT text | csv, HEADER [boolean])``
    or the older ``[WITH] CSV [HEADER]``."""
    words = text.lower()
    words = words[4:].strip() if re.match(r"with\b", words) else words
    if words.startswith("(") and words.endswith(")"):
        csv, header = False, False
        for option in filter(None, (item.strip() for item in words[1:-1].split(","))):
            name, _, value = option.partition(" ")
            value = value.strip().strip("'\"")
            if name == "format" and value in ("text", "csv"):
                csv = value == "csv"
            elif name == "header" and value in _TRUE | _FALSE:
                header = value in _TRUE
            else:
                raise _refused(f"COPY option {option[:40]!r} is not offered")
        return csv, header
    legacy = {"": (False, False), "csv": (True, False), "csv header": (True, True)}
    if " ".join(words.split()) not in legacy:
        raise _refused(f"COPY options {text[:60]!r} are not offered")
    return legacy[" ".join(words.split())]


def _refused(message: str) -> ServiceError:
    return ServiceError("not_supported", f"{message}; dpsql writes a SELECT's answer in "
                        "PostgreSQL's text or CSV format, with HEADER if asked", hint=_HINT)


def lines(copy: Copy, names: list[str], rows: list[list[str | None]]) -> list[bytes]:
    """The answer's lines (a header first if asked) as COPY writes them: tab-separated
    with backslash escapes and NULL as \\N, or CSV (NULL as nothing, an empty string
    quoted)."""
    field, separator = (_csv, ",") if copy.csv else (_text, "\t")
    out = [names] if copy.header else []
    return [(separator.join(map(field, row)) + "\n").encode("utf-8") for row in out + rows]


def _text(value: str | None) -> str:
    return "\\N" if value is None else value.translate(_ESCAPES)


def _csv(value: str | None) -> str:
    if value is None:
        return ""
    if value == "" or value == "\\." or any(char in value for char in ',"\r\n'):
        return '"' + value.replace('"', '""') + '"'
    return value
