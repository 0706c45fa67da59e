"""SQL text read lexically, without parsing: where its quotes and comments are.

The server's wire protocol and the remote client both need to split statements and rewrite
placeholders in text that may hold ``;``, ``?`` or ``$1`` inside a string literal, a quoted
identifier or a comment; those must be left alone. sqlglot's tokenizer is imported only
where placeholders are read, so that the ``dpsql://`` client splits statements without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache


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


def qmarks(sql: str, dialect: str = "duckdb") -> list[tuple[int, int]]:
    """Where the ``?`` placeholders are (start, end), as the dialect's tokenizer (sqlglot's)
    finds them: not in its strings, quoted names or comments, nested ones too."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except TokenError:
        return []  # parsing the statement reports it
    found = []
    for before, token in zip([None, *tokens], tokens):
        if token.token_type == TokenType.PLACEHOLDER and token.text == "?":
            found.append((token.start, token.end))
        elif token.token_type == TokenType.QDCOLON and (
                before is None or before.token_type not in _operand_ends()):
            # '?::date' is one token (Databricks' try-cast operator after an operand): where
            # no operand precedes it, it is a placeholder cast, as PostgreSQL users write it
            found.append((token.start, token.start))
    return found


@cache
def _operand_ends() -> frozenset:
    """The tokens that end an operand: a '?::' after one is Databricks' try-cast, not a
    placeholder."""
    from sqlglot.tokens import TokenType

    return frozenset({TokenType.VAR, TokenType.NUMBER, TokenType.STRING, TokenType.IDENTIFIER,
                      TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.NULL, TokenType.TRUE,
                      TokenType.FALSE})


def replace_qmarks(sql: str, spelling, dialect: str = "duckdb") -> str:
    """``sql`` with its i-th ``?`` (from 0, found by ``qmarks``) written ``spelling(i)``."""
    pieces, last = [], 0
    for i, (start, end) in enumerate(qmarks(sql, dialect)):
        pieces += [sql[last:start], spelling(i)]
        last = end + 1
    return "".join(pieces) + sql[last:]


def qmark_to_dollar(sql: str) -> str:
    """``?`` placeholders to PostgreSQL's ``$1``, ``$2`` ..."""
    return replace_qmarks(sql, lambda i: f"${i + 1}")


def dollar_to_qmark(sql: str) -> tuple[str, list[int]]:
    """``$n`` placeholders to ``?``; returns the text and the order of the ``n``.

    The placeholders are found by PostgreSQL's tokenizer (sqlglot's), which knows its
    dollar-quoted and E'' strings and nested comments: ``spans`` does not, and rewrote a $1
    inside $$x$1$$, so the values bound one place off.
    """
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    tokenizer = Dialect.get_or_raise("postgres")
    try:
        tokens, skipped = tokenizer.tokenize(sql), 0
        if tokens and tokens[0].token_type == TokenType.COMMAND:
            # DECLARE c CURSOR FOR <select>: the tokenizer keeps a command's rest as one text
            skipped = tokens[0].end + 1
            tokens = tokenizer.tokenize(sql[skipped:])
    except TokenError:
        return sql, []  # parsing the statement reports it
    order: list[int] = []
    pieces, last = [], 0
    for sign, number in zip(tokens, tokens[1:]):
        if sign.token_type == TokenType.PARAMETER and number.token_type == TokenType.NUMBER \
                and number.start == sign.end + 1 and number.text.isascii() and \
                number.text.isdigit():
            order.append(int(number.text))
            pieces += [sql[last:skipped + sign.start], "?"]
            last = skipped + number.end + 1
    return "".join(pieces) + sql[last:], order
