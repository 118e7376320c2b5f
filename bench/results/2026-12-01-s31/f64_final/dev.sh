set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; nproc; } > $R/env.txt 2>&1
timeout 200 python3 -m pytest -m gpu -q -rs tests/kernels/test_cupy_backend_gpu.py -k "f64_chunk or ntt" tests/ckks/test_engine_gpu.py > $R/f64_tests.log 2>&1; echo "rc $?" >> $R/f64_tests.log
tail -n 4 $R/f64_tests.log
cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
