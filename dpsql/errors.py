"""PEP 249 exception tree with dpsql subclasses that say what to change.

Every class carries a stable ``code``, an optional ``hint`` and, when the error comes from
SQL, the statement and a position so that ``str(e)`` can point at the offending span.
A refusal always means nothing was spent: ``epsilon_spent`` is 0, except on the
BackendError of an exact query that failed on the data, which is charged and says so.
"""

from __future__ import annotations

import builtins

_BY_CODE: dict[str, type[Error]] = {}


class Warning(builtins.Warning):  # noqa: A001 - the PEP 249 name
    """PEP 249 Warning."""

    __module__ = "dpsql"


class InsecureRandomnessWarning(Warning):
    """A seed was given: the noise is reproducible and gives no privacy."""

    __module__ = "dpsql"


class BoundsDefaultWarning(Warning):
    """A private table with a privacy unit omits max_groups_per_unit or max_rows_per_group,
    so 1 is used: every person's rows beyond one group, or one row per group, are dropped."""

    __module__ = "dpsql"


class EmptyFilterWarning(Warning):
    """No declared value of a column passes a WHERE conjunct that reads it alone (a typo
    such as sex = 'male' where the values are Female and Male): the answer counts only rows
    outside the metadata's values, so it is likely noise alone."""

    __module__ = "dpsql"


class UnreadRowsWarning(Warning):
    """Rows of a private CSV source could not be read (bytes not in its encoding, another
    number of fields) and are left out; said to the data owner's connection only."""

    __module__ = "dpsql"


class NoisyRankingWarning(Warning):
    """ORDER BY an aggregate ... LIMIT k: the 95% intervals of the last row kept and the
    first left out overlap, so noise decides which rows make the cut (and the rows kept are
    those whose noise came out high). Decided on the released values only."""

    __module__ = "dpsql"


class Error(Exception):
    """Base of every error dpsql raises."""

    code = "error"
    epsilon_spent = 0

    def __init_subclass__(cls, code: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.__module__ = "dpsql"
        if code is not None:
            cls.code = code
            _BY_CODE[code] = cls

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        sql: str | None = None,
        position: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.sql = sql
        self.position = position  # (line, col), 1-based, as sqlglot reports them

    def __reduce__(self):  # keep hint/sql/position when pickled across processes
        return (_rebuild, (type(self), self.message, self.hint, self.sql, self.position))

    def __str__(self) -> str:
        parts = [self.message]
        if self.sql is not None and self.position is not None:
            parts.append(_caret(self.sql, *self.position))
        if self.hint:
            parts.append(f"Hint: {self.hint}")
        return "\n".join(parts)


def _rebuild(cls, message, hint, sql, position):
    return cls(message, hint=hint, sql=sql, position=position)


def _caret(sql: str, line: int, col: int) -> str:
    lines = sql.splitlines() or [""]
    line = min(max(line, 1), len(lines))
    text = lines[line - 1]
    return f"  {text}\n  {' ' * max(col - 1, 0)}^"


class InterfaceError(Error, code="interface"):
    """Misuse of a connection or cursor (closed, fetch before execute, bad argument)."""


class DatabaseError(Error, code="database"):
    """Errors related to the data or the query."""


class ProgrammingError(DatabaseError, code="programming"):
    """The analyst must change the SQL or the metadata."""


class SQLSyntaxError(ProgrammingError, code="syntax"):
    """sqlglot cannot parse the SQL."""


class CatalogError(ProgrammingError, code="catalog"):
    """The metadata catalogue is invalid."""


class UnknownTableError(CatalogError, code="unknown_table"):
    """The SQL names a table the metadata does not declare."""


class UnknownColumnError(CatalogError, code="unknown_column"):
    """The SQL names a column the metadata does not declare."""


class MissingBoundsError(CatalogError, code="missing_bounds"):
    """A column feeds SUM/AVG without declared lower/upper bounds."""


class NonAggregateQueryError(ProgrammingError, code="non_aggregate"):
    """The SELECT would return private rows rather than aggregates."""


class PrivateGroupKeysError(ProgrammingError, code="private_keys"):
    """A GROUP BY key has no public domain and no δ was given."""


class PrivacyParameterError(ProgrammingError, code="bad_privacy_parameter"):
    """ε, δ or ρ is not a valid privacy parameter."""


class NotSupportedError(DatabaseError, code="not_supported"):
    """Valid SQL or API use that dpsql does not (yet) provide."""


class UnsupportedSQLError(NotSupportedError, code="unsupported_sql"):
    """A SQL construct dpsql cannot answer privately (yet)."""


class OperationalError(DatabaseError, code="operational"):
    """The query is fine; the state of the system refuses it."""


class BudgetExhaustedError(OperationalError, code="budget_exhausted"):
    """The request costs more than the remaining privacy budget."""

    def __init__(self, message: str, **kwargs) -> None:
        self.analyst = kwargs.pop("analyst", None)
        self.dataset = kwargs.pop("dataset", None)
        self.requested = kwargs.pop("requested", None)
        self.remaining = kwargs.pop("remaining", None)
        super().__init__(message, **kwargs)


class LedgerError(OperationalError, code="ledger"):
    """The budget ledger cannot be read or written."""


class BackendError(OperationalError, code="backend"):
    """The database driver failed; the driver's error is the __cause__.

    ``resource`` names what ran out ('memory', 'time'), if that was the cause.
    """

    def __init__(self, message: str, *, resource: str | None = None, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.resource = resource


class QueryTimeoutError(BackendError, code="timeout"):
    """The exact query ran longer than the connection's timeout and was stopped."""

    def __init__(self, message: str, **kwargs) -> None:
        super().__init__(message, resource="time", **kwargs)


class QueryCanceledError(BackendError, code="query_canceled"):
    """The client cancelled the statement (a CancelRequest) while its exact query ran."""

    def __init__(self, message: str, **kwargs) -> None:
        super().__init__(message, resource="time", **kwargs)


class DataError(DatabaseError, code="data"):
    """The data contradict the metadata."""


class ServerConfigError(Error, code="server_config"):
    """A ``dpsql serve`` configuration file is invalid (the message names the key)."""


class IntegrityError(DatabaseError, code="ledger_integrity"):
    """Ledger rows fail their consistency checks."""


class InternalError(DatabaseError, code="internal"):
    """A dpsql invariant broke; nothing was released."""

    def __init__(self, message: str, **kwargs) -> None:
        super().__init__(f"{message} (this is a bug, please report it)", **kwargs)


def lookup(code: str) -> type[Error]:
    """Return the error class registered under ``code``."""
    return _BY_CODE[code]
