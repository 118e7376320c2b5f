set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
timeout 300 python3 bench/ntt_cluster_probe.py $R/cp --reps 20 --variants "$VARIANTS" > $R/cp.log 2>&1; echo "cp rc $?" >> $R/env.txt
cat $R/cp.log | tail -30
cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
