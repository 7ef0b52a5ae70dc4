#!/usr/bin/env bash
# Run the secureboost-psi federation on this machine: three organisations, each its own
# process, talking over loopback with mutual TLS. It copies this folder's federation and party
# files into a work folder, writes each organisation's data there (make_data.py), makes
# fresh certificates, starts the three parties, waits, and prints each party's result.
#
#   examples/deploy/secureboost-psi/run-local.sh [WORK_FOLDER]
#
# Environment: PYTHON (default: the repository's .venv, else python3), BASE_PORT (use
# BASE_PORT+1 .. BASE_PORT+3 instead of the file's 47201-47203), KEY_BITS (default: the
# file's 2048; below 2048 the run opts into insecure_keys, for tests), SEED (the bank's
# row and column draws, default: the file's 0), DEADLINE (seconds to wait for the
# parties, default 900).
# (examples/deploy/run-federation.sh does the work.)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec bash "$here/../run-federation.sh" "$here" bank "bank telco retailer" "$@"
