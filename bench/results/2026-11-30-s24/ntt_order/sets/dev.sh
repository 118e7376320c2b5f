R=$OUT/x; mkdir -p $R
CPUS=$(cd new && python3 bench/quiet_cpu.py --count 2)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date; echo "cpus $CPUS"; echo "tree $(cat TREE) (new) and the same with FHE_NTT_BATCH_FAST defaulting to 1 (fast)";
  python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; } > $R/env.txt 2>&1
V="base=;fast=-DFHE_NTT_BATCH_FAST=1;base2=;fast2=-DFHE_NTT_BATCH_FAST=1"
OPS="ntt_forward(ct),ntt_inverse(ct),modup with NTT hint,rotation hoisted,keyswitch_from_digits ntt-domain,keyswitch_from_digits_many ntt-domain,keyswitch_linear_transform rescale=True domain=ntt,relinearize rescale=True ntt->ntt"
(cd new && PYTHONPATH=$PWD timeout 250 taskset -c $CPUS python3 bench/kernels_gpu.py $R/ab --sets n14,n15,n16 --l2-group-mib 0 --reps 40 --ops "$OPS" --ntt-variants "$V" > $R/ab.log 2>&1; echo "ab rc $?" >> $R/env.txt)
for round in 1 2; do for tree in new fast; do
  (cd $tree && PYTHONPATH=$PWD timeout 100 taskset -c $CPUS python3 bench/matvec_gpu_quick.py $R/mv_${tree}_$round --n16 none > $R/mv_${tree}_$round.log 2>&1; echo "mv $tree $round rc $?" >> $R/env.txt)
done; done
cd $OUT && tar czf x.tgz x && rm -rf x
