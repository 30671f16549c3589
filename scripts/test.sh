#!/bin/bash
# Set up everything the test suite needs (incl. a real libvirtd + QEMU for the end-to-end tests) and
# run the whole suite: lint, types and import contracts (scripts/lint.sh) beside pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
# The tests generate a few hundred small host trees (~14 MB of small files each): on a memory file
# system when there is one that can run programs (the tests run fake tools), else the default tmp.
base=""
if [ -d /dev/shm ] && base=$(mktemp -d /dev/shm/nodeconsole-tests.XXXXXX 2>/dev/null); then
  printf '#!/bin/sh\nexit 0\n' > "$base/probe" && chmod +x "$base/probe"
  "$base/probe" 2>/dev/null || { rm -rf "$base"; base=""; }
fi
[ -n "$base" ] || base=$(mktemp -d)
trap 'rm -rf "$base"' EXIT
# Lint and types run beside pytest (they need a core of their own for ~10 s); both must pass.
bash scripts/lint.sh > "$base/lint.log" 2>&1 &
lint=$!
rc=0
.venv/bin/python -m pytest -q -p no:cacheprovider --basetemp="$base/pytest" "$@" || rc=$?
lint_rc=0
wait "$lint" || lint_rc=$?
echo "--- scripts/lint.sh (ruff, mypy, import contracts) ---"
cat "$base/lint.log"
if [ "$lint_rc" != 0 ]; then
  echo "test.sh: lint or type check failed (exit $lint_rc)" >&2
  exit "$lint_rc"
fi
exit "$rc"
