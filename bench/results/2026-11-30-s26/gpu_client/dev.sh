set -u
R=$OUT/x; mkdir -p $R
cd new
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE) (old: 0b6033d)"; } > $R/env.txt 2>&1
timeout 150 python3 bench/client_ops.py --device cuda --runs 15 --warmup 3 --out $R/new_a > $R/client_ops_new_a.log 2>&1
cd ../old && PYTHONPATH=$PWD timeout 200 python3 bench/client_ops.py --device cuda --runs 9 --warmup 2 --out $R/old > $R/client_ops_old.log 2>&1
cd ../new
timeout 150 python3 bench/client_ops.py --device cuda --runs 15 --warmup 3 --out $R/new_b > $R/client_ops_new_b.log 2>&1
timeout 330 python3 -m pytest -m gpu -q -rs tests/ckks tests/interop tests/kernels > $R/gpu_suite_part1.log 2>&1; echo "rc $?" >> $R/gpu_suite_part1.log
timeout 90 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py > $R/gpu_suite_part2.log 2>&1; echo "rc $?" >> $R/gpu_suite_part2.log
tail -n 3 $R/gpu_suite_part1.log; tail -n 3 $R/gpu_suite_part2.log; cat $R/client_ops_new_a.log $R/client_ops_old.log $R/client_ops_new_b.log
cd $OUT && tar czf x.tgz x && rm -rf x
