set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; nproc; } > $R/env.txt 2>&1
timeout 50 python3 -m pytest -m gpu -q -rs tests/kernels/test_cupy_backend_gpu.py -k f64_chunk > $R/f64_tests.log 2>&1; echo "rc $?" >> $R/f64_tests.log
tail -n 4 $R/f64_tests.log
timeout 140 python3 bench/kernels_gpu.py $R/ab --sets n16d4,n14 --l2-group-mib 0 --reps 30 --ntt-variants "off=-DFHE_NTT_F64_CHUNK=0;f64=;off2=-DFHE_NTT_F64_CHUNK=0;f64b=" > $R/ab.log 2>&1; echo "ab rc $?" >> $R/env.txt
grep -E "ntt_forward\(ct\)|ntt_inverse\(ct\)|rotation hoisted|rescale\(ct, ntt\)|relinearize rescale=True ntt->ntt|chunk kernel only|mismatch|differ" $R/ab.log | cut -c1-200
timeout 290 python3 -m pytest -m gpu -q -rs tests/ckks tests/interop tests/kernels > $R/gpu_part1.log 2>&1; echo "rc $?" >> $R/gpu_part1.log
tail -n 5 $R/gpu_part1.log
timeout 60 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py > $R/gpu_part2.log 2>&1; echo "rc $?" >> $R/gpu_part2.log
tail -n 4 $R/gpu_part2.log
cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
