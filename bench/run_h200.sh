#!/usr/bin/env bash
# Everything for one GPU record in one call (< 10 minutes), written into one directory:
#   bash bench/run_h200.sh "$OUT"
# -> results.json, results.md, up to 4 PNGs (bench/run_all.py) and demo_and_examples.txt
#    (fhelium-cupy info, the demo, examples/0*). Each step has its own time limit; a bench
#    cut short still leaves results.json (rewritten after every size) and it is redrawn.
# Knobs (environment): BENCH_PRESETS, BENCH_BUDGET (s, default 250), BENCH_TIMEOUT (s, default 320),
#    BENCH_RUNS (default 20).
set -u
OUT=${1:?usage: bash bench/run_h200.sh OUTPUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute: the script changes to the repository root below
LOG="$OUT/demo_and_examples.txt"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PRESETS=${BENCH_PRESETS:-"--preset slots8192-scale40-depth7:8,16,32,64 --preset slots32768-scale40-depth34:8"}

{ echo "== fhelium-cupy info"; python -m fhelium_cupy info; } > "$LOG" 2>&1
{ echo "== fhelium-cupy demo"; timeout 90 python -m fhelium_cupy demo --no-progress --replays 4; echo "rc=$?"; } >> "$LOG" 2>&1

# shellcheck disable=SC2086
timeout "${BENCH_TIMEOUT:-320}" python bench/run_all.py --out "$OUT" --budget-s "${BENCH_BUDGET:-250}" \
    --runs "${BENCH_RUNS:-20}" $PRESETS
rc=$?
echo "bench rc=$rc"
if [ "$rc" -ne 0 ] && [ -f "$OUT/results.json" ]; then
    python bench/run_all.py --from-json "$OUT/results.json" --out "$OUT" || true
fi

for example in examples/0*.py; do
    { echo "== $example"; timeout 35 python "$example"; echo "rc=$?"; } >> "$LOG" 2>&1
done
tail -n 60 "$LOG"
