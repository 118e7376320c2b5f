set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE) (old: c7c7c11 with this tree's bench/graph_replay.py)"; } > $R/env.txt 2>&1
CPUS=$(python3 bench/quiet_cpu.py --count 2 2>/dev/null || echo "")
echo "cpus $CPUS" >> $R/env.txt
for t in old new old new; do
  (cd ../$t && PYTHONPATH=$PWD timeout 40 taskset -c ${CPUS:-0,1} python3 bench/graph_replay.py --runs 1000 --json $R/replay_$t.json > /dev/null 2>> $R/replay.err; echo "$t rc $?" >> $R/env.txt)
  python3 -c "import json,sys; r=json.load(open('$R/replay_$t.json')); t=r['ciphertext_torch_stream']; c=r['ciphertext']; print('$t', 'torch-stream replay', round(t['host_replay']['median_us'],2), 'prepared', round(t['host_replay_prepared']['median_us'],2), '| cupy-stream replay', round(c['host_replay']['median_us'],2), 'prepared', round(c['host_replay_prepared']['median_us'],2))" >> $R/replay.txt 2>&1
  mv $R/replay_$t.json $R/replay_${t}_$(date +%s).json
done
cat $R/replay.txt
timeout 130 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py > $R/gpu_suite_part2.log 2>&1; echo "rc $?" >> $R/gpu_suite_part2.log
tail -n 3 $R/gpu_suite_part2.log
timeout 345 python3 -m pytest -m gpu -q -rs tests/ckks tests/interop tests/kernels > $R/gpu_suite_part1.log 2>&1; echo "rc $?" >> $R/gpu_suite_part1.log
tail -n 4 $R/gpu_suite_part1.log; cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
