set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
timeout 250 python3 -m pytest -m gpu -q -rs tests/ckks/test_engine_gpu.py tests/test_docs_gpu.py tests/runtime/test_sticky_error_gpu.py "tests/kernels/test_cupy_backend_gpu.py" -k "flooded or example or readme or demo or sticky or moddown or rns_from or centered or round_trip or public_key" > $R/final_targeted.log 2>&1; echo "rc $?" >> $R/final_targeted.log
timeout 60 python3 examples/07_shared_result_noise_flooding.py > $R/example07.log 2>&1; echo "rc $?" >> $R/example07.log
tail -n 4 $R/final_targeted.log; cat $R/example07.log
cd $OUT && tar czf x.tgz x && rm -rf x
