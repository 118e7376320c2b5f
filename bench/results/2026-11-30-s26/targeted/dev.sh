set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
timeout 300 python3 -m pytest -m gpu -q -rs tests/runtime/test_sticky_error_gpu.py tests/runtime/test_teardown_host.py tests/ckks/test_flooding.py "tests/ckks/test_engine_gpu.py::test_a_flooded_gpu_decryption_adds_one_noise_polynomial_of_sigma_to_the_cpu_phase" "tests/test_docs_gpu.py::test_each_example_runs_its_cuda_path" tests/runtime/test_lifecycle_gpu.py tests/runtime/test_pool_gpu.py > $R/targeted.log 2>&1; echo "rc $?" >> $R/targeted.log
timeout 60 python3 examples/07_shared_result_noise_flooding.py > $R/example07.log 2>&1; echo "rc $?" >> $R/example07.log
tail -n 5 $R/targeted.log; cat $R/example07.log
cd $OUT && tar czf x.tgz x && rm -rf x
