#!/bin/bash
# Set up everything the test suite needs (incl. a real libvirtd + QEMU for the end-to-end tests) and
# run the whole suite: lint and types (scripts/lint.sh: ruff, mypy), then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
bash scripts/lint.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
