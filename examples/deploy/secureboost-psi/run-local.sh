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
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$root/.venv/bin/python" ]]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/islands-secureboost-psi.XXXXXX")}
parties=(bank telco retailer)
mkdir -p "$work"
cp "$here"/*.toml "$work"/
"$PYTHON" - "$work/federation.toml" "${BASE_PORT:-}" "${KEY_BITS:-}" "${SEED:-}" <<'PY'
import re, sys
path, base, bits, seed = sys.argv[1:5]
text = open(path, encoding="utf-8").read()
if base:
    text = re.sub(r"127\.0\.0\.1:4720([1-3])", lambda m: f"127.0.0.1:{int(base) + int(m[1])}", text)
if bits:  # below 2048 bits only with insecure_keys (tests only; every result says so)
    opt_in = "\ninsecure_keys = true" if int(bits) < 2048 else ""
    text = re.sub(r"(?m)^key_bits = \d+", f"key_bits = {int(bits)}{opt_in}", text)
if seed:
    text = re.sub(r"(?m)^seed = \d+", f"seed = {int(seed)}", text)
open(path, "w", encoding="utf-8").write(text)
PY
"$PYTHON" "$here/make_data.py" "$work"
"$PYTHON" -m islands.cli certs --parties "$(IFS=,; echo "${parties[*]}")" --out "$work/certs" --force >/dev/null

echo "starting ${parties[*]} in $work (logs: <party>.log)"
declare -A pid
for p in "${parties[@]}"; do
    (cd "$work" && exec "$PYTHON" -m islands.cli party --config "$p.toml" >"$p.log" 2>&1) &
    pid[$p]=$!
done
deadline=$((SECONDS + ${DEADLINE:-900}))
status=0
for p in "${parties[@]}"; do
    while kill -0 "${pid[$p]}" 2>/dev/null; do
        if (( SECONDS > deadline )); then
            echo "deadline passed: stopping the parties" >&2
            kill "${pid[@]}" 2>/dev/null || true
            status=1
            break 2
        fi
        sleep 1
    done
    if ! wait "${pid[$p]}"; then echo "party $p failed (see $work/$p.log)" >&2; status=1; fi
done
for p in "${parties[@]}"; do
    echo "== $p =="
    if [[ -f "$work/out/$p/result.json" ]]; then cat "$work/out/$p/result.json"; else tail -5 "$work/$p.log"; fi
done
if [[ -f "$work/out/bank/predictions.csv" ]]; then
    echo "== bank's predictions (first 10 of $(($(wc -l <"$work/out/bank/predictions.csv") - 1))) =="
    head -11 "$work/out/bank/predictions.csv"
    "$PYTHON" - "$work" <<'PY'
import csv, sys
work = sys.argv[1]
truth = {r["id"]: r["label"] for r in csv.DictReader(open(f"{work}/truth.csv"))}
pred = {r["id"]: r["label"] for r in csv.DictReader(open(f"{work}/out/bank/predictions.csv"))}
right = sum(pred[i] == truth[i] for i in pred)
print(f"{right} of {len(pred)} predictions match the held-back outcomes")
PY
fi
exit $status
