set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
CPUS=$(python3 bench/quiet_cpu.py --count 2 2>/dev/null || echo "")
echo "cpus $CPUS" >> $R/env.txt
timeout 300 taskset -c ${CPUS:-0,1} python3 bench/kernels_gpu.py $R/k --sets n16d4 --l2-group-mib 0 --reps 30 --ops "rotation hoisted,keyswitch_from_digits ntt,keyswitch_from_digits_many ntt" --ntt-variants "kb4=;kb0=-DFHE_MODDOWN_KIP_BLOCKS=0;kb8=-DFHE_MODDOWN_KIP_BLOCKS=8;kb2=-DFHE_MODDOWN_KIP_BLOCKS=2;kb4_b=" > $R/k.log 2>&1; echo "k rc $?" >> $R/env.txt
grep -E "rotation hoisted|keyswitch_from|MISMATCH|variant" $R/k.log | cut -c1-200 | head -40; cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
