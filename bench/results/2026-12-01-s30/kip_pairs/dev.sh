set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
CPUS=$(python3 bench/quiet_cpu.py --count 2 2>/dev/null || echo "")
echo "cpus $CPUS" >> $R/env.txt
timeout 100 python3 -m pytest -m gpu -q -rs tests/kernels/test_cupy_backend_gpu.py -k "side_stream or rotation" > $R/gpu_tests.log 2>&1; echo "rc $?" >> $R/gpu_tests.log
tail -n 3 $R/gpu_tests.log
timeout 240 taskset -c ${CPUS:-0,1} python3 bench/kernels_gpu.py $R/k --sets n16d4 --l2-group-mib 0 --reps 30 --ops "rotation hoisted,keyswitch_from_digits ntt,keyswitch_from_digits_many ntt" --ntt-variants "kb4p0=-DFHE_KIP_STRIDED_PAIRS=0;kb2p1=-DFHE_MODDOWN_KIP_BLOCKS=2;kb2p0=-DFHE_MODDOWN_KIP_BLOCKS=2 -DFHE_KIP_STRIDED_PAIRS=0;kb1p1=-DFHE_MODDOWN_KIP_BLOCKS=1;kb3p1=-DFHE_MODDOWN_KIP_BLOCKS=3;kb4p1=;kb0=-DFHE_MODDOWN_KIP_BLOCKS=0" > $R/k.log 2>&1; echo "k rc $?" >> $R/env.txt
grep -E "rotation hoisted|keyswitch_from|MISMATCH" $R/k.log | sed -E 's/n16d4 g= 0MiB t= 0 f=1056 p=0 //; s/ +floor.*//' | head -40; cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
