#!/usr/bin/env bash
# Install dpsql with its test dependencies, start what the backend tests need (PostgreSQL on
# 127.0.0.1 and Java for Spark, see scripts/services.sh), and run the test suite. This is the
# README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e ".[test]"
if ! bash scripts/services.sh; then
    if [ "${CI:-}" = true ]; then
        echo "scripts/test.sh: the backend services could not be installed or started" >&2
        exit 1
    fi
    echo "scripts/test.sh: no PostgreSQL/Spark here; tests/backends will be skipped" >&2
fi
# The shared data sets live beside the checkout (../shared/datasets, see DESIGN.md), never in
# the repository. A clone made elsewhere from a local checkout finds them beside its origin.
if [ -z "${DPSQL_DATASETS:-}" ] && [ ! -d ../shared/datasets ]; then
    origin=$(git remote get-url origin 2>/dev/null || true)
    if [ -n "$origin" ] && [ -d "$origin/../shared/datasets" ]; then
        DPSQL_DATASETS=$(cd "$origin/../shared/datasets" && pwd)
        export DPSQL_DATASETS
        echo "scripts/test.sh: shared data sets from $DPSQL_DATASETS" >&2
    fi
fi
# no stage imports a later one; evaluators use the public API (.importlinter)
lint-imports
# the package: wheel + sdist build and pass `twine check`, and after installing the wheel alone
# in a fresh venv every `dpsql ... --help` and the README's main job work (~2 minutes;
# DPSQL_SKIP_INSTALL_CHECK=1 skips it locally, never in CI)
if [ "${DPSQL_SKIP_INSTALL_CHECK:-}" != 1 ] || [ "${CI:-}" = true ]; then
    bash scripts/check_install.sh
fi
python3 -m pytest -q "$@"
