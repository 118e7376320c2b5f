set -u
R=$OUT/x; mkdir -p $R
cd new4
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; date -u; echo "tree $(cat ../TREE4)"; } > $R/env.txt 2>&1
timeout 50 python3 -m pytest -m gpu -q -rs tests/test_docs_gpu.py tests/test_cli.py > $R/gpu_docs.log 2>&1; echo "rc $?" >> $R/gpu_docs.log
tail -n 3 $R/gpu_docs.log
timeout 70 python3 -m pytest -m gpu -q -rs tests/ckks > $R/gpu_ckks.log 2>&1; echo "rc $?" >> $R/gpu_ckks.log
tail -n 3 $R/gpu_ckks.log
timeout 160 python3 -m pytest -m gpu -q -rs tests/kernels > $R/gpu_kernels.log 2>&1; echo "rc $?" >> $R/gpu_kernels.log
tail -n 3 $R/gpu_kernels.log
cd $OUT && tar czf x.tgz x && rm -rf x
