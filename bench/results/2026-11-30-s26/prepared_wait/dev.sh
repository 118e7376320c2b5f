set -u
R=$OUT/x; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; date -u; echo "new tree $(cat TREE), old tree c66dcfa"; } > $R/env.txt 2>&1
CPU=$(cd new && python3 bench/quiet_cpu.py --count 1 2>/dev/null || echo 0); echo "cpu $CPU" >> $R/env.txt
for round in 1 2; do
  for t in new old; do
    (cd $t && PYTHONPATH=$PWD timeout 100 taskset -c $CPU python3 bench/replay_host_breakdown.py --programs add --runs 1500 --cold-runs 200 --json $R/${t}_$round.json > $R/${t}_$round.log 2>&1)
  done
done
(cd new && PYTHONPATH=$PWD timeout 120 python3 -m pytest -m gpu -q -rs tests/runtime > $R/gpu_runtime.log 2>&1; echo "rc $?" >> $R/gpu_runtime.log)
python3 - <<'PY' > $R/summary.txt
import json, os
R=os.environ.get("OUT")+"/x"
for name in ("new_1","old_1","new_2","old_2"):
    try:
        d=json.load(open(f"{R}/{name}.json"))["programs"]["add"]
        w=d["warm"]; c=d["cold"]
        f=lambda x: round(x.get("median_us", float("nan")),2) if isinstance(x, dict) else x
        print(name, "warm launch", f(w.get("graph_launch",{})), "replay_prepared", f(w.get("replay_prepared",{})), "prepared(handle)", f(w.get("replay_prepared_handle",{})), "replay", f(w.get("replay",{})), "| cold prepared(handle, transfer)", f(c.get("replay_prepared_handle",{})))
    except Exception as e:
        print(name, "error", e)
PY
cat $R/summary.txt; tail -2 $R/gpu_runtime.log
cd $OUT && tar czf x.tgz x && rm -rf x
