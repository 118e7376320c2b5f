set -u
R=$OUT/x; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; date -u; echo "tree $(cat TREE), old $(cat TREE_OLD) with the new test"; } > $R/env.txt 2>&1
(cd old && PYTHONPATH=$PWD timeout 60 python3 -m pytest -m gpu -q -rs tests/runtime/test_cuda_graph_gpu.py -k torch_temporaries > $R/old_tree_new_test.log 2>&1; echo "rc $?" >> $R/old_tree_new_test.log)
(cd new && PYTHONPATH=$PWD timeout 200 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py tests/ckks/test_matvec_graph_gpu.py tests/interop > $R/new_tree_runtime.log 2>&1; echo "rc $?" >> $R/new_tree_runtime.log)
tail -n 3 $R/old_tree_new_test.log; tail -n 3 $R/new_tree_runtime.log
cd $OUT && tar czf x.tgz x && rm -rf x
