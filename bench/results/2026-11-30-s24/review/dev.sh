cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date; echo "tree $(cat ../TREE)";
  python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; } > $R/env.txt 2>&1
timeout 300 python3 -m pytest -m gpu -q -rs tests/kernels/test_cupy_backend_gpu.py -k "side_stream or keyswitch or relinear" > $R/gpu_ks_tests.log 2>&1; echo "ks tests rc $?" >> $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
