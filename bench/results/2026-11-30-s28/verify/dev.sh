set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
CPUS=$(python3 bench/quiet_cpu.py --count 2 2>/dev/null || echo "")
echo "cpus $CPUS" >> $R/env.txt
timeout 300 python3 -m pytest -m gpu -q -rs tests/ckks tests/interop tests/kernels > $R/gpu_suite_part1.log 2>&1; echo "rc $?" >> $R/gpu_suite_part1.log
timeout 80 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py > $R/gpu_suite_part2.log 2>&1; echo "rc $?" >> $R/gpu_suite_part2.log
timeout 120 taskset -c ${CPUS:-0,1} python3 bench/kernels_gpu.py $R/k --sets n16d4,n14 --l2-group-mib 0 --reps 50 --ntt-variants "int=-DFHE_NTT_F64=0;f64=;int_b=-DFHE_NTT_F64=0;f64_b=" > $R/k.log 2>&1; echo "k rc $?" >> $R/env.txt
timeout 70 taskset -c ${CPUS:-0,1} python3 bench/kernels_gpu.py $R/p --sets n16d4,n16p41 --l2-group-mib 0 --reps 50 > $R/p.log 2>&1; echo "p rc $?" >> $R/env.txt
tail -n 3 $R/gpu_suite_part1.log; tail -n 3 $R/gpu_suite_part2.log; tail -n 5 $R/k.log; cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
