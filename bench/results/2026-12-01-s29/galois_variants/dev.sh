set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
CPUS=$(python3 bench/quiet_cpu.py --count 2 2>/dev/null || echo "")
echo "cpus $CPUS" >> $R/env.txt
timeout 330 taskset -c ${CPUS:-0,1} python3 bench/kernels_gpu.py $R/k --sets n16d4 --l2-group-mib 0 --reps 50 --ntt-variants "lv2=;v8=-DFHE_KIP_GALOIS_V8=1;pf=-DFHE_KIP_GALOIS_PREFETCH=1;unfused=-DFHE_ROTATE_FUSED=0;lv2_b=;v8_b=-DFHE_KIP_GALOIS_V8=1;unfused_b=-DFHE_ROTATE_FUSED=0" > $R/k.log 2>&1; echo "k rc $?" >> $R/env.txt
grep -E "rotation hoisted|MISMATCH|mismatch|Error" $R/k.log | cut -c1-20,40-200 | head -40; grep -c '"matches_first_variant": false' $R/k/kernels_gpu.json; cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
