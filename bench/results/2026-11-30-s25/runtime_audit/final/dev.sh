set -u
R=$OUT/x; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; date -u; echo "tree $(cat TREE)"; } > $R/env.txt 2>&1
(cd new && PYTHONPATH=$PWD timeout 300 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py tests/ckks/test_matvec_graph_gpu.py tests/ckks/test_engine_multi_gpu.py tests/interop > $R/new_tree_runtime.log 2>&1; echo "rc $?" >> $R/new_tree_runtime.log)
tail -n 4 $R/new_tree_runtime.log
cd $OUT && tar czf x.tgz x && rm -rf x
