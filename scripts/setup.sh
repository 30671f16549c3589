#!/bin/bash
# Set up nodeconsole in ./.venv. `setup.sh` installs what the console needs; `setup.sh --test` also
# installs what the test suite needs (a real libvirtd + QEMU for the end-to-end tests, tmux, rsvg, Prometheus and promtool).
# Debian/Ubuntu packages are installed with apt-get when missing (needs root); otherwise it says what
# to install and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-run}

PKGS="python3 python3-venv python3-dev gcc pkg-config libvirt-dev pci.ids"
if [ "$MODE" = "--test" ]; then
  PKGS="$PKGS tmux librsvg2-bin bc htop libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils libvirt-clients prometheus"
fi

missing=""
if command -v dpkg-query >/dev/null 2>&1; then
  for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
else
  echo "setup: this is not a Debian-like system (no dpkg). Install the equivalents of:$PKGS" >&2
  echo "setup: then run: python3 -m venv .venv && .venv/bin/pip install -e '.[test]'" >&2
  command -v pkg-config >/dev/null && pkg-config --exists libvirt || exit 1
fi
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing Debian packages:$missing" >&2
    echo "setup: run as root, or first: sudo apt-get install -y$missing" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: no apt-get; install these packages by hand:$missing" >&2
    exit 1
  fi
  echo "setup: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends $missing >/dev/null
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: nodeconsole needs Python >= 3.11 ($PY is $("$PY" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# Exactly the tested versions (constraints.txt), built without fetching a build backend of the day.
stamp=.venv/.installed
if [ ! -f $stamp ] || [ pyproject.toml -nt $stamp ] || [ constraints.txt -nt $stamp ] \
   || [ "$MODE" = "--test" -a ! -f $stamp.test ]; then
  pip=(.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt)
  "${pip[@]}" pip setuptools wheel
  if [ "$MODE" = "--test" ]; then
    "${pip[@]}" --no-build-isolation -e '.[test]'
    touch $stamp.test
  else
    "${pip[@]}" --no-build-isolation -e .
  fi
  touch $stamp
fi
# Byte-compile the checkout, as pip does for an installed package: an editable install otherwise
# compiles every module at each start wherever PYTHONDONTWRITEBYTECODE is set (the console starts
# ~0.1 s sooner). Cheap when nothing changed: only sources newer than their .pyc are compiled.
.venv/bin/python -m compileall -q -j 0 console screens actions themes benchmarks >/dev/null
