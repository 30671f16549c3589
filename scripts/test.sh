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
# Lint and types run beside pytest (a few seconds of one CPU); both must pass.
bash scripts/lint.sh > "$base/lint.log" 2>&1 &
lint=$!
# pytest runs in parallel (pytest-xdist), two workers per CPU: much of the suite waits (on the terminal
# apps under test, on subprocesses, on QEMU), so a second worker per CPU fills the waits. At most 16
# workers; on one CPU, one process. Each worker has its own temporary HOME (tests/conftest.py) and its
# own folder under --basetemp; the tests on the real libvirtd stay together in one worker (--dist
# loadgroup; tests/conftest.py groups them). `scripts/test.sh -n 0` runs everything in one process.
cpus=$(nproc 2>/dev/null || echo 1)
# a CPU quota (cgroup v2, e.g. a container's --cpus) allows fewer CPUs than the affinity mask shows
quota=max period=0
[ -r /sys/fs/cgroup/cpu.max ] && read -r quota period < /sys/fs/cgroup/cpu.max
if [ "$quota" != max ] && [ "$period" -gt 0 ] && [ $(( (quota + period - 1) / period )) -lt "$cpus" ]; then
  cpus=$(( (quota + period - 1) / period ))
fi
workers=()
if [ "$cpus" -ge 2 ]; then
  n=$(( cpus * 2 > 16 ? 16 : cpus * 2 ))
  workers=(-n "$n" --dist loadgroup)
fi
rc=0
.venv/bin/python -m pytest -q -p no:cacheprovider --basetemp="$base/pytest" ${workers[@]+"${workers[@]}"} "$@" || rc=$?
# The screens' tests once more with stock Textual (NODECONSOLE_STOCK_TEXTUAL=1: no screens/fast/), when
# the whole suite was asked for (no arguments); the tests of screens/fast/ itself are deselected there.
if [ "$#" -eq 0 ]; then
  rm -rf "$base/pytest"  # the first run's trees: room for the second on a memory file system
  echo "--- tests/screens with stock Textual (--stock-textual) ---"
  .venv/bin/python -m pytest -q -p no:cacheprovider --basetemp="$base/pytest-stock" ${workers[@]+"${workers[@]}"} \
    --stock-textual tests/screens || rc=$?
fi
lint_rc=0
wait "$lint" || lint_rc=$?
echo "--- scripts/lint.sh (ruff, mypy, import contracts) ---"
cat "$base/lint.log"
if [ "$lint_rc" != 0 ]; then
  echo "test.sh: lint or type check failed (exit $lint_rc)" >&2
  exit "$lint_rc"
fi
exit "$rc"
