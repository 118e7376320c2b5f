set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion(), 'driver', cupy.cuda.runtime.driverGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
timeout 60 python3 -m pytest -m gpu -q -rs tests/interop/test_interop_gpu.py > $R/interop.log 2>&1; echo "rc $?" >> $R/interop.log
grep -E "Error|error|assert|^E " $R/interop.log | head -30; tail -n 5 $R/interop.log
timeout 200 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py > $R/gpu_suite_part2.log 2>&1; echo "rc $?" >> $R/gpu_suite_part2.log
tail -n 4 $R/gpu_suite_part2.log
cd $OUT && tar czf x.tgz x && rm -rf x
