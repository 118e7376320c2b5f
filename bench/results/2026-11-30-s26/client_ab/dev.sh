set -u
R=$OUT/x; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "new tree $(cat TREE), old tree ec29047"; } > $R/env.txt 2>&1
for round in 1 2; do
  (cd new && PYTHONPATH=$PWD timeout 120 python3 bench/client_ops.py --device cuda --runs 9 --warmup 2 > $R/new_$round.log 2>&1)
  (cd old && PYTHONPATH=$PWD timeout 150 python3 bench/client_ops.py --device cuda --runs 5 --warmup 1 > $R/old_$round.log 2>&1)
done
paste <(cut -c1-80 $R/old_1.log) <(awk '{print $NF-1 >= 0 ? $(NF-1) : ""}' $R/old_2.log) <(awk '{print $(NF-1)}' $R/new_1.log) <(awk '{print $(NF-1)}' $R/new_2.log) > $R/side_by_side.txt
cat $R/side_by_side.txt
cd $OUT && tar czf x.tgz x && rm -rf x
