set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
timeout 300 python3 -m pytest -m gpu -q -rs tests/ckks/test_engine_gpu.py tests/ckks/test_security_properties.py tests/ckks/test_serialization.py > $R/gpu_engine.log 2>&1; echo "rc $?" >> $R/gpu_engine.log
tail -n 3 $R/gpu_engine.log
cd $OUT && tar czf x.tgz x && rm -rf x
