#!/bin/bash
# Set up (Debian packages, ./.venv, the package) and start the console on the bundled demo host.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/nodeconsole --demo "$@"
