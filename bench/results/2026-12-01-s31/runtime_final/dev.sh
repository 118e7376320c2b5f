set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
timeout 150 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py tests/interop > $R/gpu_runtime.log 2>&1; echo "rc $?" >> $R/gpu_runtime.log
tail -n 6 $R/gpu_runtime.log
cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
