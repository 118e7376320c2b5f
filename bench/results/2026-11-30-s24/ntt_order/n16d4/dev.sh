cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
CPUS=$(python3 bench/quiet_cpu.py --count 2)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date; echo "cpus $CPUS"; echo "tree $(cat ../TREE)";
  python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; } > $R/env.txt 2>&1
V="base=;fast=-DFHE_NTT_BATCH_FAST=1;base2=;fast2=-DFHE_NTT_BATCH_FAST=1"
OPS="ntt_forward(ct),ntt_inverse(ct),rotation hoisted,keyswitch_from_digits ntt-domain,keyswitch_from_digits_many ntt-domain"
timeout 400 taskset -c $CPUS python3 bench/kernels_gpu.py $R/ab --sets n16d4 --l2-group-mib 0,16 --reps 40 --ops "$OPS" --ntt-variants "$V" > $R/ab.log 2>&1; echo "ab rc $?" >> $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
