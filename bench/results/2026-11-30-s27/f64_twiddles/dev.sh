set -u
R=$OUT/x; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; date -u; echo "new tree $(cat TREE); old tree 4da41fb"; } > $R/env.txt 2>&1
CPUS=$(cd new && python3 bench/quiet_cpu.py --count 2 2>/dev/null || echo "0,1")
echo "cpus $CPUS" >> $R/env.txt
(cd new && PYTHONPATH=$PWD timeout 110 python3 -m pytest -m gpu -q -rs -x tests/kernels -k ntt > $R/gpu_kernels_ntt.log 2>&1; echo "rc $?" >> $R/gpu_kernels_ntt.log)
tail -n 2 $R/gpu_kernels_ntt.log
for round in a b; do
  for tree in old new; do
    (cd $tree && PYTHONPATH=$PWD timeout 50 taskset -c $CPUS python3 bench/kernels_gpu.py $R/k_${tree}_$round --sets n16d4 --l2-group-mib 0 --reps 30 > $R/k_${tree}_$round.log 2>&1; echo "$tree $round rc $?" >> $R/env.txt)
  done
done
for f in $R/k_*/kernels_gpu.md; do echo "== $f"; grep -E "ntt_forward\(ct|ntt_inverse\(ct|chunk kernel|column kernel|hoisted ntt->ntt" $f; done
cd $OUT && tar czf x.tgz x && rm -rf x
