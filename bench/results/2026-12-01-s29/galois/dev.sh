set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
CPUS=$(python3 bench/quiet_cpu.py --count 2 2>/dev/null || echo "")
echo "cpus $CPUS" >> $R/env.txt
timeout 150 python3 -m pytest -m gpu -q -rs tests/interop/test_interop_gpu.py tests/kernels/test_cupy_backend_gpu.py -k "interop or (tensor_cores and rotate)" > $R/gpu_tests.log 2>&1; echo "rc $?" >> $R/gpu_tests.log
tail -n 4 $R/gpu_tests.log; grep -E "^E |FAILED" $R/gpu_tests.log | head -20
timeout 300 taskset -c ${CPUS:-0,1} python3 bench/kernels_gpu.py $R/k --sets n16d4,n14 --l2-group-mib 0 --reps 50 --ntt-variants "fused=;unfused=-DFHE_ROTATE_FUSED=0;fused_b=;unfused_b=-DFHE_ROTATE_FUSED=0" > $R/k.log 2>&1; echo "k rc $?" >> $R/env.txt
grep -E "rotation hoisted|MISMATCH|mismatch" $R/k.log | cut -c1-20,40-200 | head -40; cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
