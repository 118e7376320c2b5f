set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; nproc; } > $R/env.txt 2>&1
timeout 380 python3 -m pytest -m gpu -q -rs tests/ckks tests/interop tests/kernels > $R/gpu_part1.log 2>&1; echo "rc $?" >> $R/gpu_part1.log
tail -n 6 $R/gpu_part1.log
timeout 120 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py > $R/gpu_part2.log 2>&1; echo "rc $?" >> $R/gpu_part2.log
tail -n 6 $R/gpu_part2.log
timeout 80 python3 bench/kernels_gpu.py $R/k --sets n16d4,n14 --l2-group-mib 0 --reps 30 > $R/k.log 2>&1; echo "k rc $?" >> $R/env.txt
tail -n 30 $R/k.log
cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
