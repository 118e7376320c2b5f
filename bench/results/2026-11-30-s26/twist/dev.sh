set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
timeout 120 python3 -m pytest -m gpu -q -rs tests/ckks/test_engine_gpu.py tests/ckks/test_matvec_graph_gpu.py -k "round_trip or public_key or flooded or adopting or loading or matvec" > $R/engine_gpu.log 2>&1; echo "rc $?" >> $R/engine_gpu.log
timeout 90 python3 bench/client_ops.py --device cuda --runs 15 --warmup 3 --out $R > $R/client_ops.log 2>&1
tail -n 3 $R/engine_gpu.log; cat $R/client_ops.log
cd $OUT && tar czf x.tgz x && rm -rf x
