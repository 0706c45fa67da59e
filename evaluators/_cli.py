"""The options every ``dpsql evaluate <name>`` and every reproduction script share, defined once.

Each evaluator command takes the same names with the same meaning:

``--metadata/-m``   the YAML catalogue;            ``--table/-t``  the private table;
``--epsilon/-e``    the ε the evaluator spends;    ``--json``      one JSON object on stdout;
``--output/-o``     where the result is written;   ``--seed``      the evaluator's own sampling
(train/test splits; commands that draw none do not offer it; each command's ``seed_help`` says
what else it fixes, e.g. the noise in naive-bayes and cf); ``--insecure-seed`` reproducible
noise for experiments, which gives NO privacy; ``--analyst`` who is charged and logged;
``--ledger`` the dataset's ledger (default: beside the metadata, ``dataset_ledger``; with
``--db``, as ``dpsql run --db``: beside the database).
``evaluator_options`` adds them in this order and makes the engine's
``InsecureRandomnessWarning`` print once per run, not once per connection.

The reproductions (``python -m evaluators.experiments.<name>``) share ``experiment_options``:
``--quick``, ``--output DIR`` (default ``build/reports/<name>``, never the committed
``docs/reports``), ``--replot`` (re-render from the CSVs in ``--output``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

import dpsql
from dpsql.cli_params import METADATA_FILE

#: Where reproductions write unless ``--output`` says otherwise; ``docs/reports/<name>`` holds
#: the committed full runs and is written only when given explicitly.
DEFAULT_EXPERIMENT_ROOT = Path("build") / "reports"


#: The key under which an evaluator's JSON groups its exact figures of the private data (row
#: counts, accuracies scored on the custodian's true test rows): they are not DP and are for
#: the custodian who ran it, never to be published with the release.
EXACT = "scored on the true rows (not DP)"


def reuse_note(spent: float, asked: float | None) -> str | None:
    """What to tell a user whose release came back at ε 0 though ε was asked: the engine
    returned the stored answer of an identical earlier release (the same noise, nothing
    spent), which a researcher repeating a run to average over noise must know."""
    if spent or not asked:
        return None
    return ("(the stored answer of an identical earlier release: the same noise, nothing "
            "spent; for fresh draws give --ledger :memory: or another ε)")


def _warning_once(func: Callable) -> Callable:
    """``func`` run with the insecure-seed warning shown once per run."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with insecure_warning_once():
            return func(*args, **kwargs)
    return wrapper


@contextlib.contextmanager
def insecure_warning_once() -> Iterator[None]:
    """Show each distinct ``InsecureRandomnessWarning`` once in the block, not once per
    connection or repetition.

    A ``"once"`` warnings filter is not enough: Python forgets what it has shown whenever any
    filter changes (every ``catch_warnings`` block, and importing scikit-learn, do that), so
    the repeats are dropped here, by message, at display time.
    """
    seen: set[str] = set()
    show = warnings.showwarning

    def show_once(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, dpsql.InsecureRandomnessWarning):
            if str(message) in seen:
                return
            seen.add(str(message))
        show(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", dpsql.InsecureRandomnessWarning)
        warnings.showwarning = show_once
        yield


def evaluator_options(*, metadata_default: str | None = None,
                      table_default: str | None = None,
                      table_help: str = "The private table.",
                      epsilon_default: float | None = None, epsilon_required: bool = False,
                      epsilon_help: str = "Total ε the evaluator spends.",
                      output_help: str = "Also write the JSON result to this file.",
                      seed: bool = True,
                      seed_help: str = "Seed of the evaluator's own sampling (train/test "
                      "split); the noise stays cryptographic unless --insecure-seed is given.",
                      insecure_seed_help: str = "Reproducible noise for experiments: gives NO "
                      "privacy.",
                      ledger_help: str = "Budget ledger that records the run (default: the "
                      "dataset's, beside the metadata; ':memory:' for a throw-away run)."
                      ) -> Callable:
    """The shared options, in one order, with per-command help where the meaning narrows."""

    def decorate(func: Callable) -> Callable:
        wrapper = _warning_once(func)
        options = [
            click.option("--metadata", "-m", required=metadata_default is None,
                         default=metadata_default, show_default=metadata_default is not None,
                         type=METADATA_FILE,
                         help="YAML metadata of the data set (tables, domains, bounds, budget)."),
            click.option("--table", "-t", required=table_default is None, default=table_default,
                         show_default=table_default is not None, help=table_help),
            click.option("--epsilon", "-e", type=float, required=epsilon_required,
                         default=epsilon_default, show_default=epsilon_default is not None,
                         help=epsilon_help),
            click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
                         callback=_writable_output, help=output_help),
        ]
        if seed:
            # numpy's generators take seeds ≥ 0 (a negative one was a traceback)
            options.append(click.option("--seed", type=click.IntRange(min=0), default=None,
                                        help=seed_help))
        options += [
            click.option("--insecure-seed", type=click.IntRange(min=0), default=None,
                         help=insecure_seed_help),
            click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
            click.option("--analyst", default=None,
                         help="Who is charged and logged in the ledger (default: $USER)."),
            click.option("--ledger", default=None, help=ledger_help),
        ]
        for option in reversed(options):
            wrapper = option(wrapper)
        return wrapper

    return decorate


def _writable_output(ctx: click.Context, param: click.Parameter,
                     value: str | None) -> str | None:
    """``--output``, refused before the evaluator spends anything if it cannot be created: an
    unwritable path lost a charged result to a traceback. A file made for the check is
    removed again."""
    if value is None:
        return None
    path = Path(value)
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a"):
            pass
    except OSError as err:
        raise click.BadParameter(f"cannot write {value!r}: {err.strerror or err}",
                                 ctx=ctx, param=param) from err
    if not existed:
        path.unlink()
    return value


def dataset_ledger(metadata: str | Path, ledger: str | None) -> str:
    """``ledger``, else the dataset's own, where ``dpsql.connect(metadata=<that file>)`` keeps it.

    An evaluator's training copy holds the same people as the dataset, so it is charged, and
    the custodian's reads are logged, in the dataset's ledger.
    """
    return ledger or f"{Path(metadata).resolve()}.dpsql-ledger.sqlite"


def emit(result: dict, *, as_json: bool, output: str | None,
         text: Callable[[dict], None]) -> None:
    """Print ``result`` as JSON or as text, then write it to ``--output`` (JSON) if given.

    Raises:
        dpsql.OperationalError: the file could not be written (a full disk); the result was
            printed, and the error carries the run's ``epsilon_spent``.
    """
    if as_json:
        click.echo(json.dumps(result))
    else:
        text(result)
    if output is None:
        return
    try:
        Path(output).write_text(json.dumps(result, indent=2) + "\n")
    except OSError as err:
        error = dpsql.OperationalError(
            f"the result printed above could not be written to {output!r}: "
            f"{err.strerror or err}", hint="keep the printed result, or free the disk or pick "
            "another --output for the next run")
        error.epsilon_spent = result.get("epsilon_spent", 0)
        raise error from err
    if not as_json:
        click.echo(f"wrote {output}")


def experiment_options(name: str, *, quick_help: str = "A small, fast run (a smoke test).",
                       replot_help: str = "Rebuild summary, figures and report from the CSVs "
                       "already in --output, without rerunning.") -> Callable:
    """``--quick``, ``--output DIR`` and ``--replot`` for ``evaluators.experiments.<name>``.

    The default folder is ``build/reports/<name>``, so a quick run never overwrites the
    committed ``docs/reports/<name>``; pass ``--output docs/reports/<name>`` to refresh it.
    """
    default = DEFAULT_EXPERIMENT_ROOT / name

    def decorate(func: Callable) -> Callable:
        wrapper = _warning_once(func)
        options = [
            click.option("--quick", is_flag=True, help=quick_help),
            click.option("--output", "-o", "--out", "output", default=str(default),
                         show_default=True, type=click.Path(file_okay=False, path_type=Path),
                         help="Folder for the CSVs, figures and report (docs/reports/" + name
                         + " only when given explicitly)."),
            click.option("--replot", "--report-only", "--render-only", "replot", is_flag=True,
                         help=replot_help),
        ]
        for option in reversed(options):
            wrapper = option(wrapper)
        return wrapper

    return decorate
