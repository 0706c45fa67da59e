"""A read of private data that failed: charged like an answer, and reported by a coded error.

Whether a read fails, runs out of time or of memory can depend on one person's rows, so a
failure is charged as an answer would have been (``Engine.execute``, ``tune``), and the
database's own message, which can quote private values, is not passed on.
"""

from __future__ import annotations

from dpsql.budget import PrivacyLoss
from dpsql.errors import (BackendError, Error, InternalError, QueryCanceledError,
                          QueryTimeoutError)

FAILED = "-- failed on the data\n"  # heads the ledger's record of a charged failure


def charged_failure(failure: Error, loss: PrivacyLoss, *, subject: str, payer: str,
                    plural: bool, timeout: float | None, hints: tuple[str, str]) -> Error:
    """The coded error of ``subject``'s failure (``the exact query``; ``plural`` for
    ``tune's exact reads``) after the charge, saying that ``payer``'s ``loss`` was charged;
    ``hints`` for a timeout and for a resource that ran out. A refusal of dpsql's own (not a
    BackendError: a source replaced after the tables were checked) is returned as it is,
    its ``epsilon_spent`` set."""
    if not isinstance(failure, BackendError):
        failure.epsilon_spent = loss.epsilon
        return failure
    def verb(word: str) -> str:
        return word if plural else word + ("es" if word.endswith("sh") else "s")

    charged = (f"nothing was released and {payer}'s {loss.describe()} was charged, "
               f"because whether {'they' if plural else 'it'}")
    if isinstance(failure, QueryTimeoutError):
        error: Error = QueryTimeoutError(
            f"{subject} ran longer than the timeout of {timeout:g} s; {charged} "
            f"{verb('finish')} in time can depend on a person's rows", hint=hints[0])
    elif isinstance(failure, QueryCanceledError):
        error = QueryCanceledError(
            f"canceling statement due to user request: {subject} was stopped; {charged} "
            f"{verb('finish')} before the cancel can depend on a person's rows")
    elif failure.resource:
        error = BackendError(
            f"{subject} ran out of {failure.resource}; {charged} {verb('fit')} can depend on "
            "a person's rows", resource=failure.resource, hint=hints[1])
    else:
        # compiled expressions are total: no value of a declared type can make the read
        # fail, so a failure here is an engine bug (still charged)
        error = InternalError(f"{subject} failed; {charged} {verb('fail')} might depend on "
                              "the data")
    error.epsilon_spent = loss.epsilon
    return error
