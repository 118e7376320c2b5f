set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
timeout 170 python3 bench/kernels_gpu.py $R/ab --sets n16d4,n14 --l2-group-mib 0 --reps 30 --ops ntt_forward,ntt_inverse,rotation,rescale,relinearize --ntt-variants "single=-DFHE_NTT_TWIDDLE_PAIRS=0;pairs=;single2=-DFHE_NTT_TWIDDLE_PAIRS=0;pairs2=" > $R/ab.log 2>&1; echo "ab rc $?" >> $R/env.txt
grep -E "ntt_forward\(ct\)|ntt_inverse\(ct\)|rotation hoisted|rescale\(ct, ntt\)|relinearize rescale=True ntt->ntt|mismatch|differ|Error" $R/ab.log | cut -c1-170
timeout 200 python3 -m pytest -m gpu -q -rs tests/kernels/test_cupy_backend_gpu.py -k "f64_chunk or ntt or rotation" > $R/gpu_tests.log 2>&1; echo "rc $?" >> $R/gpu_tests.log
tail -n 3 $R/gpu_tests.log
cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
