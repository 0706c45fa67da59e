#!/usr/bin/env bash
# Package check, run by scripts/test.sh: build the wheel and sdist (`python -m build`),
# `twine check` them, install the wheel alone into a fresh virtual environment (no
# system site-packages) and check that everything the CLI offers works after exactly that
# install: `dpsql --help`, every subcommand's --help (the entry-point plugins and every
# `dpsql evaluate` evaluator included) and the README's main job, run from the repository root
# (data/ and queries/ live in the repository, not in the wheel).
# Usage: bash scripts/check_install.sh [KEEP_DIR]   (default: a temporary folder, removed)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=${1:-$(mktemp -d -t dpsql-install-XXXXXX)}
[ -n "${1:-}" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
started=$SECONDS

python3 -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 \
    || { cat "$work/build.log" >&2; exit 1; }
python3 -m twine check --strict "$work"/dist/*
wheel=$(ls "$work"/dist/dpsql-*.whl)
ls "$work"/dist/dpsql-*.tar.gz >/dev/null

python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel" \
    2> >(grep -v "^WARNING: Location" >&2)
bin="$work/venv/bin"

# Outside the checkout the installed package must be the one that is imported.
(cd "$work" && "$bin/python" -c "import dpsql, evaluators, sys
assert '$work/venv' in dpsql.__file__, dpsql.__file__
print('installed', dpsql.__version__, 'at', dpsql.__file__)")

check_help() {
    if ! out=$("$bin/dpsql" "$@" --help 2>&1); then
        echo "scripts/check_install.sh: 'dpsql $* --help' failed after 'pip install dpsql':" >&2
        echo "$out" >&2
        exit 1
    fi
    echo "ok: dpsql $* --help"
}
check_help
commands=$(cd "$work" && "$bin/python" - <<'EOF'
import click
from dpsql.cli import main
ctx = click.Context(main)
print(" ".join(main.list_commands(ctx)))
EOF
)
evaluators=$(cd "$work" && "$bin/python" - <<'EOF'
import click
from dpsql.cli import evaluate
print(" ".join(evaluate.list_commands(click.Context(evaluate))))
EOF
)
for command in $commands; do
    check_help "$command"
done
for evaluator in $evaluators; do
    check_help evaluate "$evaluator"
done
[ -n "$evaluators" ] || { echo "no evaluate plugins found" >&2; exit 1; }

# The README's main job against the installed wheel (a throw-away ledger: the check spends
# nothing from the repository's budget).
"$bin/dpsql" run queries/visits_by_day.sql --metadata data/visits.yaml --epsilon 1 \
    --ledger "$work/ledger.sqlite" | tee "$work/run.txt"
grep -q "ε spent: 1; remaining: 9" "$work/run.txt"
"$bin/dpsql" explain queries/visits_by_day.sql --metadata data/visits.yaml --epsilon 1 \
    --ledger "$work/ledger.sqlite" --json >/dev/null
echo "scripts/check_install.sh: wheel, sdist and a fresh install checked in $((SECONDS - started)) s"
cd "$root"
