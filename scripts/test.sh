#!/bin/bash
# Set up everything the test suite needs (incl. a real libvirtd + QEMU for the end-to-end tests) and
# run the whole suite: lint and types (scripts/lint.sh: ruff, mypy), then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
bash scripts/lint.sh
# The tests generate a few hundred small host trees (~14 MB of small files each): on a memory file
# system when there is one that can run programs (the tests run fake tools), else the default tmp.
base=""
if [ -d /dev/shm ] && base=$(mktemp -d /dev/shm/nodeconsole-tests.XXXXXX 2>/dev/null); then
  printf '#!/bin/sh\nexit 0\n' > "$base/probe" && chmod +x "$base/probe"
  "$base/probe" 2>/dev/null || { rm -rf "$base"; base=""; }
fi
[ -n "$base" ] || base=$(mktemp -d)
trap 'rm -rf "$base"' EXIT
.venv/bin/python -m pytest -q -p no:cacheprovider --basetemp="$base/pytest" "$@"
