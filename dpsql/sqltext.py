"""SQL text read lexically, without parsing: where its quotes and comments are.

The server's wire protocol and the remote client both need to split statements and rewrite
placeholders in text that may hold ``;``, ``?`` or ``$1`` inside a string literal, a quoted
identifier or a comment; those must be left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_DOLLAR = re.compile(r"\$(\d+)")


def spans(sql: str) -> Iterator[tuple[str, bool]]:
    """The text in order, each piece marked True when it is code (outside quotes and
    comments); quoted and commented pieces keep their delimiters."""
    start, i, n = 0, 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":
            end = i + 1
            while end < n:  # a doubled quote is the quote character itself
                if sql[end] == c:
                    if end + 1 < n and sql[end + 1] == c:
                        end += 2
                        continue
                    break
                end += 1
            end = min(end + 1, n)
        elif sql.startswith("--", i):
            newline = sql.find("\n", i)
            end = n if newline < 0 else newline + 1
        elif sql.startswith("/*", i):
            close = sql.find("*/", i + 2)
            end = n if close < 0 else close + 2
        else:
            i += 1
            continue
        if start < i:
            yield sql[start:i], True
        yield sql[i:end], False
        start = i = end
    if start < n:
        yield sql[start:], True


def split_statements(sql: str) -> list[str]:
    """The statements of a script, split on semicolons in code; pieces holding only
    whitespace and comments are dropped."""
    out, current, has_code = [], [], False
    for text, code in spans(sql):
        if not code:
            current.append(text)
            continue
        *pieces, last = text.split(";")
        for piece in pieces:
            current.append(piece)
            if has_code or piece.strip():
                out.append("".join(current).strip())
            current, has_code = [], False
        current.append(last)
        has_code = has_code or bool(last.strip())
    if has_code:
        out.append("".join(current).strip())
    return out


def qmark_to_dollar(sql: str) -> str:
    """``?`` placeholders in code to PostgreSQL's ``$1``, ``$2`` ..."""
    out, count = [], 0
    for text, code in spans(sql):
        if code:
            pieces = text.split("?")
            text = pieces[0]
            for piece in pieces[1:]:
                count += 1
                text += f"${count}{piece}"
        out.append(text)
    return "".join(out)


def dollar_to_qmark(sql: str) -> tuple[str, list[int]]:
    """``$n`` placeholders in code to ``?``; returns the text and the order of the ``n``."""
    order: list[int] = []

    def one(match: re.Match) -> str:
        order.append(int(match.group(1)))
        return "?"

    return "".join(_DOLLAR.sub(one, text) if code else text for text, code in spans(sql)), \
        order
