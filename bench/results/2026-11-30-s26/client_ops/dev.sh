set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; nproc; } > $R/env.txt 2>&1
timeout 400 python3 bench/client_ops.py --device cuda --runs 15 --warmup 3 --out $R > $R/client_ops.log 2>&1; echo "rc $?" >> $R/client_ops.log
cat $R/client_ops.log
cd $OUT && tar czf x.tgz x && rm -rf x
