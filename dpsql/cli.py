"""The ``dpsql`` command line: a thin click layer over the public API.

``run`` executes a SQL script as one release, ``explain`` shows its plan without touching data
or budget, ``budget`` shows the ledger, ``evaluate`` runs the paper algorithms (loaded from
the ``dpsql.evaluators`` entry points) and further commands come from ``dpsql.commands``.
Every ``dpsql.Error`` becomes a message on stderr (JSON with ``--json``) and exit code 1.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import os
import re
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import click

import dpsql
from dpsql import explain_text
from dpsql.cli_params import connection_options

# `dpsql --help` and each command's --help import neither the query stack (DuckDB, sqlglot,
# pandas) nor any plugin: the modules below are imported inside the commands that use them,
# and a plugin's one-line help is read from its source (benchmarks/startup.py times this).


def _plugin_help(entry, limit: int) -> str:
    """First docstring paragraph of a plugin command, from its module's source (no import)."""
    import ast
    import importlib.util

    try:  # find_spec of the top package only: a submodule's would import its parents
        top, *rest = entry.module.split(".")
        spec = importlib.util.find_spec(top)
        path = Path(spec.origin)
        if rest:
            path = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
            path = path.with_suffix(".py") if path.with_suffix(".py").is_file() \
                else path / "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        function = next(node for node in tree.body if getattr(node, "name", None) == entry.attr)
        text = ast.get_docstring(function) or ""
    except Exception:  # noqa: BLE001 - help text only; the command still loads on use
        return ""
    return click.utils.make_default_short_help(" ".join(text.split("\n\n")[0].split()), limit)


# a hint's API keyword (epsilon=1.0) as the flag of the command line (--epsilon 1.0); the
# keywords of a WITH DIFFERENTIAL_PRIVACY OPTIONS(...) clause are SQL, and those of a
# "(Python: ...)" example Python: both stay as written
_KEYWORD = re.compile(r"OPTIONS\([^()]*\)|\(Python:[^()]*(?:\([^()]*\)[^()]*)*\)"
                      r"|\b(epsilon|delta|tune)=(\.\.\.|\d(?:[\w.+-]*\d)?)?")


def _flag_syntax(hint: str) -> str:
    """``hint`` with the keywords that are also flags of ``dpsql run`` spelt as the flags."""
    def flag(match: re.Match) -> str:
        name, value = match.groups()
        if name is None:
            return match.group()
        return f"--{name}" + (f" {value}" if value else "")
    return _KEYWORD.sub(flag, hint)


def _error_payload(err: dpsql.Error) -> dict:
    return {"ok": False, "error": str(err), "code": err.code, "class": type(err).__name__,
            "hint": err.hint, "epsilon_spent": float(err.epsilon_spent)}


_FORMAT_WARNING = warnings.formatwarning


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """dpsql's warnings as one line, in flag syntax (Python's format showed the file and
    source line of the library that warned); any other warning as Python formats it."""
    if issubclass(category, dpsql.Warning):
        return f"Warning: {_flag_syntax(str(message))}\n"
    return _FORMAT_WARNING(message, category, filename, lineno, line)


class _Group(click.Group):
    """A group that turns dpsql errors into clean messages and loads plugin commands."""

    def __init__(self, *args, entry_group: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.entry_group = entry_group

    def _plugins(self) -> dict:
        if self.entry_group is None:
            return {}
        from importlib.metadata import entry_points  # only when a plugin is looked for

        return {e.name: e for e in entry_points(group=self.entry_group)}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._plugins()))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, with plugins' short help read from their source, not imported."""
        names = [n for n in self.list_commands(ctx)]
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        plugins = self._plugins()
        rows = []
        for name in names:
            command = super().get_command(ctx, name)
            if command is None:
                rows.append((name, _plugin_help(plugins[name], limit)))
            elif not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, name: str):
        command = super().get_command(ctx, name)
        if command is not None:
            return command
        plugin = self._plugins().get(name)
        if plugin is None:
            return None
        try:
            return plugin.load()
        except ImportError as err:
            raise click.ClickException(f"command {name!r} is not available: {err}") from err

    def invoke(self, ctx: click.Context):
        with warnings.catch_warnings():
            warnings.formatwarning = _format_warning
            return self._invoke(ctx)

    def _invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as err:
            if "--json" not in sys.argv[1:]:
                raise  # click prints it with the command's usage, exit 2
            hint = f"see {err.ctx.command_path} --help" if err.ctx is not None else None
            click.echo(json.dumps({"ok": False, "error": err.format_message(), "code": "usage",
                                   "class": "UsageError", "hint": hint, "epsilon_spent": 0.0}),
                       err=True)
            ctx.exit(err.exit_code)
        except dpsql.Error as err:
            if err.hint:
                err.hint = _flag_syntax(err.hint)
            wants_json = "--json" in sys.argv[1:]
            message = json.dumps(_error_payload(err)) if wants_json else f"Error: {err}"
            click.echo(message, err=True)
            ctx.exit(1)


@click.group(cls=_Group, entry_group="dpsql.commands")
@click.version_option(dpsql.__version__, prog_name="dpsql")
def main() -> None:
    """Differentially private SQL: ordinary SQL in, private rows out."""


def _read_script(path: str) -> str:
    """The SQL of the script at ``path``, or of stdin for ``-``."""
    if path == "-":
        return sys.stdin.read()
    file = Path(path)
    try:
        found = file.is_file()
    except OSError:  # a name the file system refuses, such as a whole statement
        found = False
    if not found:
        shown = path if len(path) <= 60 else path[:57] + "..."
        raise dpsql.InterfaceError(
            f"SQL script {shown!r} does not exist",
            hint="pass the path of a .sql file, or - to read the SQL from stdin "
                 "(echo 'SELECT ...' | dpsql run - ...)")
    return file.read_text()


_delta_option = click.option(
    "--delta", "-d", type=float, default=None,
    help="δ for the whole script: allows GROUP BY keys without a public domain (released "
    "above a noisy threshold) and the Gaussian mechanism's ε-to-ρ conversion.")
_dialect_option = click.option(
    "--dialect", default=None,
    help="SQL dialect the script is written in (postgres, bigquery, snowflake, spark, tsql, "
    "mysql, sqlite, ...; default: the metadata's dialect, else DuckDB).")


def _connect(db, **options) -> dpsql.Connection:
    """``dpsql.connect``, passing ``dialect`` only when one was asked for."""
    if options.get("dialect") is None:
        options.pop("dialect", None)
    return dpsql.connect(db, **options)


def _cli_hint(err: dpsql.PrivacyParameterError, hint: str) -> dpsql.PrivacyParameterError:
    """The engine's refusal of a parameter, with the hint of the command line, not the API's."""
    return dpsql.PrivacyParameterError(err.message, hint=hint, sql=err.sql,
                                       position=err.position)


_bounding_option = click.option(
    "--bounding", type=click.Choice(["per_query", "snapshot"]), default="per_query",
    show_default=True, help="Bound each person's rows in every query (after its WHERE), or "
    "once per table and GROUP BY in a snapshot that later statements reuse (before WHERE).")


@main.command()
@click.argument("script", type=click.Path(dir_okay=False, allow_dash=True))
@connection_options
@click.option("--epsilon", "-e", type=float, default=None,
              help="ε for the whole script (one release).")
@_delta_option
@_dialect_option
@click.option("--insecure-seed", type=int, default=None,
              help="Reproducible noise for tests only: gives NO privacy.")
@_bounding_option
@click.option("--timeout", type=float, default=None,
              help="Stop an exact query after this many seconds (DuckDB, PostgreSQL; refused on "
              "Spark); it is charged.")
@click.option("--memory-limit", default=None,
              help="Memory DuckDB may use before it spills to disk, e.g. 8GB (default: the "
              "metadata's resources, else 4 GiB or half the RAM).")
@click.option("--temp-directory", type=click.Path(file_okay=False), default=None,
              help="Folder DuckDB spills into (default: the metadata's, else the system's "
              "temporary folder).")
@click.option("--tune", type=float, default=None,
              help="Spend this slice of --epsilon on choosing the table's contribution bounds "
              "from the data first, then answer at the rest (a one-statement script).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def run(script, metadata, db, analyst, ledger, epsilon, delta, dialect, insecure_seed, bounding,
        timeout, memory_limit, temp_directory, tune, as_json) -> None:
    """Run SCRIPT's SELECTs as one private release and print the noisy tables."""
    from dpsql.frames import columns as result_columns

    sql = _read_script(script)
    with _connect(db, metadata=metadata, analyst=analyst, ledger=ledger, dialect=dialect,
                  insecure_seed=insecure_seed, bounding=bounding, timeout=timeout,
                  memory_limit=memory_limit, temp_directory=temp_directory) as con:
        try:
            cursor = con.cursor().executescript(sql, epsilon=epsilon, delta=delta) \
                if tune is None else \
                con.cursor().execute(sql, epsilon=epsilon, delta=delta, tune=tune)
        except dpsql.PrivacyParameterError as err:
            if epsilon is None and con._engine.epsilon_per_query is None and \
                    err.message.startswith("no ε"):
                raise _cli_hint(err, "pass --epsilon E (the ε of the whole script, e.g. "
                                "--epsilon 1)") from err
            if tune is not None and err.message.startswith("tune"):
                whole = epsilon if epsilon is not None else con._engine.epsilon_per_query
                example = "a tenth of --epsilon" if whole is None else \
                    f"--tune {float(whole) / 10:g}"  # a slice that fits inside the ε
                raise _cli_hint(err, "--tune is the slice of the statement's ε spent on its "
                                f"bounds, e.g. {example}") from err
            raise
        # the statements as compiled, for --json only (the table and its notes need no plan)
        explained = con.explain(sql, epsilon=epsilon, delta=delta)["statements"] \
            if as_json else None
        # each set as column -> values, and what it does not show (cursor.notes: its dashes,
        # the rows its bounds drop)
        frames, notes = [], []
        keys = []  # each set's columns shown as written: GROUP BY keys and literals
        reused = []  # whether each set is an earlier identical release's stored answer
        while True:
            noisy = bool(cursor.description) and any(c.noise for c in cursor.description)
            frames.append(result_columns(cursor._require(), intervals=noisy))
            keys.append({c.name for c in cursor.description or () if noisy and not c.noise})
            notes.append(list(cursor.notes))
            reused.append(cursor._require().reused)
            if not cursor.nextset():
                break
        remaining = con.budget_remaining
        tuned = cursor.tuned_bounds
    if as_json:
        click.echo(json.dumps({
            "ok": True, "epsilon_spent": float(cursor.epsilon_spent), "reused": all(reused),
            **({"tuned_bounds": tuned} if tuned else {}),
            "total_sensitivity": _plain(cursor.sensitivity),
            "budget_remaining": None if remaining is None else float(remaining.epsilon),
            "statements": [{"sql": s["sql"], "columns": list(f),
                            "rows": [[_json_cell(v) for v in row] for row in zip(*f.values())],
                            "notes": n}
                           for s, f, n in zip(explained, frames, notes, strict=True)],
        }, default=str))
        return
    for index, (frame, noted, plain) in enumerate(zip(frames, notes, keys, strict=True), 1):
        if len(frames) > 1:
            click.echo(f"-- statement {index}")
        click.echo(_format(frame, plain))
        for note in noted:
            click.echo(note)
        click.echo()
    if tuned:
        bounds = ", ".join(f"{k} {v}" for k, v in tuned.items())
        click.echo(f"bounds chosen by --tune: {bounds} (dpsql tune shows what they may drop)")
    # a Gaussian dataset spends ρ (zCDP): its ε is 0 (round 29i: it printed "ε spent: 0")
    zcdp = bool(cursor.rho_spent) or (remaining is not None and bool(remaining.rho))
    name, spent = ("ρ", cursor.rho_spent) if zcdp else ("ε", cursor.epsilon_spent)
    click.echo(f"{name} spent: {float(spent):g}"
               + (" (the stored answer of an identical earlier release, returned again)"
                  if all(reused) else "")
               + ("" if remaining is None else
                  f"; remaining: {float(remaining.rho if zcdp else remaining.epsilon):g}"))


def _json_cell(value):
    """A result cell as JSON: dates and times in ISO 8601, floats in full (``json`` writes
    their shortest exact form), NaN and infinities as null, exact decimals as numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date too
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def _plain(value):
    return int(value) if value.denominator == 1 else float(value)


def _format(frame: dict[str, list], keys: frozenset[str] | set[str] = frozenset()) -> str:
    """Show each noisy column with its 95% interval as 'value  [low, high]'.

    ``frame`` is column -> values (``frames.columns``); the layout is pandas' ``to_string``
    without the index (right-aligned, one space apart), without importing pandas. ``keys``
    are shown as written (a year 1997, not 1,997; a decade 10, not 10.00).
    """
    shown: dict[str, list[str]] = {}
    for column, values in frame.items():
        if column.endswith(("_low", "_high")) and column.rsplit("_", 1)[0] in frame:
            continue
        numeric = _is_numeric(values)
        shown[column] = [_key_cell(v) if column in keys else _cell(v, numeric) for v in values]
        if f"{column}_low" in frame:
            # a quantile (exponential mechanism) has no interval: a dash, not [NULL, NULL]
            shown[f"{column} 95% CI"] = [
                "—" if lo is None and hi is None else f"[{_cell(lo, True)}, {_cell(hi, True)}]"
                for lo, hi in zip(frame[f"{column}_low"], frame[f"{column}_high"], strict=True)]
    if not shown:
        return "Empty result"
    widths = {c: max([len(c), *map(len, cells)]) for c, cells in shown.items()}
    lines = [" ".join(c.rjust(widths[c]) for c in shown)]
    if not any(shown.values()) or not next(iter(shown.values())):
        return lines[0]
    lines += [" ".join(cells[i].rjust(widths[c]) for c, cells in shown.items())
              for i in range(len(next(iter(shown.values()))))]
    return "\n".join(lines)


def _is_numeric(values: list) -> bool:
    return any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _key_cell(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return _cell(value) if value is None or isinstance(value, float) and math.isnan(value) \
        else str(value)


def _cell(value, numeric: bool = False) -> str:
    if value is None:
        return "NULL" if numeric else "—"
    if isinstance(value, float):
        if math.isnan(value):
            return "NULL"
        # below 1 two decimals hid the noise: a share read 0.11 [0.11, 0.11]
        return f"{value:,.2f}" if abs(value) >= 1 or value == 0 else f"{value:#.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


@main.command()
@click.argument("script", type=click.Path(dir_okay=False, allow_dash=True))
@connection_options
@click.option("--epsilon", "-e", type=float, default=None, help="ε for the whole script.")
@_delta_option
@_dialect_option
@_bounding_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def explain(script, metadata, db, analyst, ledger, epsilon, delta, dialect, bounding,
            as_json) -> None:
    """Show SCRIPT's rewritten SQL, sensitivity, noise and expected error; spends nothing."""
    sql = _read_script(script)
    with _connect(db, metadata=metadata, analyst=analyst, ledger=ledger, dialect=dialect,
                  epsilon_per_query=epsilon or 1.0, bounding=bounding) as con:
        plan = con.explain(sql, epsilon=epsilon, delta=delta)
        remaining = con.budget_remaining
    plan["budget_remaining"] = None if remaining is None else float(remaining.epsilon)
    if as_json:
        click.echo(json.dumps(plan, indent=2))
        return
    left = None if remaining is None else remaining.describe()
    click.echo("\n".join(explain_text.lines(plan, left)))


@main.command()
@connection_options
@click.option("--history", is_flag=True, help="List every recorded release.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def budget(metadata, db, analyst, ledger, history, as_json) -> None:
    """Show what has been spent on the dataset and what is left."""
    from dpsql.connection import ledger_for
    from dpsql.ledger import default_analyst

    catalog, book = ledger_for(db, metadata, ledger)
    spent = book.spent(catalog.name)
    mine = book.spent(catalog.name, analyst or default_analyst())
    total = catalog.budget
    # the ledger stores exact Fractions as text ("1/2"); JSON shows numbers throughout
    rows = [{**row, "epsilon": float(Fraction(row["epsilon"])),
             "delta": float(Fraction(row["delta"]))} for row in book.history(catalog.name)] \
        if history else []
    book.close()
    remaining = None if total is None else total.minus(spent)
    payload = {
        "dataset": catalog.name, "ledger": book.path,
        "budget_epsilon": None if total is None else float(total.epsilon),
        "budget_delta": None if total is None else float(total.delta),
        "spent_epsilon": float(spent.epsilon), "spent_delta": float(spent.delta),
        "remaining_epsilon": None if remaining is None else float(remaining.epsilon),
        "remaining_delta": None if remaining is None else float(remaining.delta),
        "analyst_spent_epsilon": float(mine.epsilon),
        "budget_rho": None if total is None else float(total.rho),
        "spent_rho": float(spent.rho),
        "remaining_rho": None if remaining is None else float(remaining.rho),
        **({"releases": rows} if history else {}),
    }
    if as_json:
        click.echo(json.dumps(payload, indent=2))
        return
    click.echo(f"dataset {catalog.name} (ledger {book.path})")
    click.echo("  budget    " + ("none: every query that reads a private table is refused"
                                 if total is None else
                                 total.describe(delta=not total.rho)))
    laplace = total is None or not total.rho  # δ shown beside ε, never beside ρ alone
    click.echo(f"  spent     {spent.describe(delta=laplace)} (you: {mine.describe()})")
    if remaining is not None:
        click.echo(f"  remaining {remaining.describe(delta=laplace)}")
    for row in rows:
        click.echo(f"  #{row['id']} {row['kind']:<5} {row['analyst']:<10} "
                   f"ε={row['epsilon']:<8g} δ={row['delta']:<8g} {row['statement'][:60]!r}")


@main.group(cls=_Group, entry_group="dpsql.evaluators")
def evaluate() -> None:
    """Run a paper algorithm through a dpsql connection (see each command's --help)."""


if __name__ == "__main__":  # pragma: no cover
    main(prog_name=os.path.basename(sys.argv[0]))
