set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
CPUS=$(python3 bench/quiet_cpu.py --count 2 2>/dev/null || echo "0,1")
echo "cpus $CPUS" >> $R/env.txt
timeout 200 python3 -m pytest -m gpu -q -rs -x tests/kernels > $R/gpu_kernels.log 2>&1; echo "rc $?" >> $R/gpu_kernels.log
tail -n 3 $R/gpu_kernels.log
timeout 330 taskset -c $CPUS python3 bench/kernels_gpu.py $R/k16 --sets n16d4,n14 --l2-group-mib 0 --reps 50 --ntt-variants "int=-DFHE_NTT_F64=0;f64=;f64_unfused=-DFHE_NTT_F64_FUSED=0;int_b=-DFHE_NTT_F64=0;f64_b=;f64_unfused_b=-DFHE_NTT_F64_FUSED=0" > $R/k16.log 2>&1; echo "k16 rc $?" >> $R/env.txt
grep -E "ntt_|hoisted|MISMATCH" $R/k16/kernels_gpu.md | head -30
cd $OUT && tar czf x.tgz x && rm -rf x
