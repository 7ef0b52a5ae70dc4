#!/usr/bin/env bash
# Run the vfl-psi federation on this machine: four organisations, each its own process,
# talking over loopback with mutual TLS. It copies this folder's federation and party
# files into a work folder, writes each organisation's data there (make_data.py), makes
# fresh certificates, starts the four parties, waits, and prints each party's result.
#
#   examples/deploy/vfl-psi/run-local.sh [WORK_FOLDER]
#
# Environment: PYTHON (default: the repository's .venv, else python3), BASE_PORT (use
# BASE_PORT+1 .. BASE_PORT+4 instead of the file's 47101-47104), KEY_BITS (default: the
# file's 2048; below 2048 the run opts into insecure_keys, for tests), SEED (the public
# batch-order seed, default: the file's 0), DEADLINE (seconds to wait for the parties,
# default 900).
# (examples/deploy/run-federation.sh does the work.)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec bash "$here/../run-federation.sh" "$here" hospital "coordinator hospital lab clinic" "$@"
