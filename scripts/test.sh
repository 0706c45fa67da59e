#!/usr/bin/env bash
# Install dpsql with its test dependencies and run the test suite (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e ".[test]"
python3 -m pytest -q "$@"
