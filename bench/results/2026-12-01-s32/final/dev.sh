set -u
R=$OUT/x; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "new tree $(cat TREE3), old tree $(cat TREE)"; nproc; } > $R/env.txt 2>&1
cd new3
export PYTHONPATH=$PWD
timeout 330 python3 -m pytest -m gpu -q -rs tests/ckks tests/interop tests/kernels > $R/gpu_part1.log 2>&1; echo "rc $?" >> $R/gpu_part1.log
tail -n 4 $R/gpu_part1.log
timeout 100 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py > $R/gpu_part2.log 2>&1; echo "rc $?" >> $R/gpu_part2.log
tail -n 4 $R/gpu_part2.log
timeout 90 python3 bench/results/2026-12-01-s32/final/probe_waves.py $R/waves.json > $R/waves.log 2>&1; echo "waves rc $?" >> $R/env.txt
cat $R/waves.log | tail -30
cd ..
CPU=$(cd new3 && python3 bench/quiet_cpu.py --count 1 2>/dev/null || echo 0); echo "cpu $CPU" >> $R/env.txt
for round in 1 2; do
  for t in new3 new; do
    (cd $t && PYTHONPATH=$PWD timeout 60 taskset -c $CPU python3 bench/replay_host_breakdown.py --programs add --runs 1500 --cold-runs 200 --json $R/${t}_$round.json > $R/${t}_$round.log 2>&1)
  done
done
python3 - <<'PY' > $R/replay_summary.txt
import json, os
R=os.environ.get("OUT")+"/x"
for name in ("new3_1","new_1","new3_2","new_2"):
    try:
        d=json.load(open(f"{R}/{name}.json"))["programs"]["add"]
        w=d["warm"]
        f=lambda x: round(x.get("median_us", float("nan")),2) if isinstance(x, dict) else x
        print(name, "warm launch", f(w.get("graph_launch",{})), "replay_prepared", f(w.get("replay_prepared",{})), "prepared(handle)", f(w.get("replay_prepared_handle",{})), "replay", f(w.get("replay",{})))
    except Exception as e:
        print(name, "error", e)
PY
cat $R/replay_summary.txt
cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
