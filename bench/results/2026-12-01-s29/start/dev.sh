set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
CPUS=$(python3 bench/quiet_cpu.py --count 2 2>/dev/null || echo "")
echo "cpus $CPUS" >> $R/env.txt
timeout 280 python3 -m pytest -m gpu -q -rs tests/ckks tests/interop tests/kernels > $R/gpu_suite_part1.log 2>&1; echo "rc $?" >> $R/gpu_suite_part1.log
tail -n 3 $R/gpu_suite_part1.log
timeout 240 taskset -c ${CPUS:-0,1} python3 bench/kernels_gpu.py $R/k --sets n16d4 --l2-group-mib 0 --reps 50 --ntt-variants "cols=;nocols=-DFHE_BYTES_COLUMNS=0;mb4=-DFHE_BYTES_COLUMNS_MIN_BLOCKS=4;cols_b=;nocols_b=-DFHE_BYTES_COLUMNS=0;mb4_b=-DFHE_BYTES_COLUMNS_MIN_BLOCKS=4" > $R/k.log 2>&1; echo "k rc $?" >> $R/env.txt
grep -E "modup|base_convert_bytes|rotation hoisted|MISMATCH" $R/k.log | cut -c1-20,40-200 | head -40; cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
