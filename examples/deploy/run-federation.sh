#!/usr/bin/env bash
# Run one of the deploy examples on this machine, each organisation its own process,
# talking over loopback with mutual TLS: the examples' run-local.sh call it.
#
#   examples/deploy/run-federation.sh EXAMPLE_FOLDER ACTIVE "PARTY ..." [WORK_FOLDER]
#
# It copies the example's federation and party files into a work folder, writes each
# organisation's data there (the example's make_data.py), makes fresh certificates,
# starts the parties, waits, prints each party's result and, when the active party
# wrote predictions, how many match truth.csv. Environment: PYTHON (default: the
# repository's .venv, else python3), BASE_PORT (the k-th party address of the
# federation file, in file order, gets port BASE_PORT + k), KEY_BITS (default: the
# file's; below 2048 the run opts into insecure_keys, for tests), SEED (default: the
# file's), DEADLINE (seconds to wait for the parties, default 900).
set -euo pipefail

example=$(cd "$1" && pwd)
name=$(basename "$example")
active=$2
read -r -a parties <<<"$3"
shift 3
root=$(cd "$example/../../.." && pwd)
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$root/.venv/bin/python" ]]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/islands-$name.XXXXXX")}
mkdir -p "$work"
cp "$example"/*.toml "$work"/
"$PYTHON" - "$work/federation.toml" "${BASE_PORT:-}" "${KEY_BITS:-}" "${SEED:-}" <<'PY'
import itertools, re, sys
path, base, bits, seed = sys.argv[1:5]
text = open(path, encoding="utf-8").read()
if base:  # the k-th party address (in file order) gets port BASE_PORT + k
    k = itertools.count(1)
    text = re.sub(r"127\.0\.0\.1:\d+", lambda m: f"127.0.0.1:{int(base) + next(k)}", text)
if bits:  # below 2048 bits only with insecure_keys (tests only; every result says so)
    opt_in = "\ninsecure_keys = true" if int(bits) < 2048 else ""
    text = re.sub(r"(?m)^key_bits = \d+", f"key_bits = {int(bits)}{opt_in}", text)
if seed:
    text = re.sub(r"(?m)^seed = \d+", f"seed = {int(seed)}", text)
open(path, "w", encoding="utf-8").write(text)
PY
"$PYTHON" "$example/make_data.py" "$work"
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
predictions="$work/out/$active/predictions.csv"
if [[ -f "$predictions" ]]; then
    echo "== $active's predictions (first 10 of $(($(wc -l <"$predictions") - 1))) =="
    head -11 "$predictions"
    "$PYTHON" - "$work/truth.csv" "$predictions" <<'PY'
import csv, sys
truth = {r["id"]: r["label"] for r in csv.DictReader(open(sys.argv[1]))}
pred = {r["id"]: r["label"] for r in csv.DictReader(open(sys.argv[2]))}
right = sum(pred[i] == truth[i] for i in pred)
print(f"{right} of {len(pred)} predictions match the held-back labels")
PY
fi
exit $status
