#!/bin/bash
# Lint and type-check: ruff over the whole repository, mypy over the headless core (console/, actions/) and the
# screens (screens/), import-linter's contracts over the package.
# The folders install as nodeconsole.console, nodeconsole.actions, ...: mypy sees them under that name
# through a temporary directory holding one link, `nodeconsole` -> this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -m ruff check --no-cache .
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ln -s "$PWD" "$tmp/nodeconsole"
cd "$tmp"
MYPYPATH="$tmp" "$OLDPWD/$PY" -m mypy --config-file "$OLDPWD/pyproject.toml" --cache-dir "$tmp/.mypy_cache" \
  -p nodeconsole.console -p nodeconsole.actions -p nodeconsole.screens
# Import contracts (pyproject.toml [tool.importlinter]): the headless core never imports Textual or the
# UI; only console/seams.py imports the simulation (console/demo/); the screens never read the sources.
PYTHONPATH="$tmp" "$(dirname "$OLDPWD/$PY")/lint-imports" --no-logo --no-cache "$OLDPWD/pyproject.toml"
