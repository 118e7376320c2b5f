set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
timeout 70 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py > $R/gpu_suite_part2.log 2>&1; echo "rc $?" >> $R/gpu_suite_part2.log
timeout 120 python3 -m pytest -m gpu -q -rs tests/kernels/test_cupy_backend_gpu.py -k "tensor_core" tests/ckks/test_engine_multi_gpu.py > $R/bytes_tests.log 2>&1; echo "rc $?" >> $R/bytes_tests.log
tail -n 3 $R/gpu_suite_part2.log; tail -n 3 $R/bytes_tests.log
cd $OUT && tar czf x.tgz x && rm -rf x
