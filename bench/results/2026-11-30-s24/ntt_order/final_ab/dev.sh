cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
CPUS=$(python3 bench/quiet_cpu.py --count 2)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date; echo "cpus $CPUS"; echo "tree $(cat ../TREE)";
  python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; } > $R/env.txt 2>&1
V="auto=;never=-DFHE_NTT_BATCH_FAST_LOG_N=99;auto2=;never2=-DFHE_NTT_BATCH_FAST_LOG_N=99"
OPS="ntt_forward(ct),ntt_inverse(ct),modup with NTT hint,rotation hoisted,keyswitch_from_digits ntt-domain,keyswitch_from_digits_many ntt-domain,keyswitch_linear_transform rescale=True domain=ntt,relinearize rescale=True ntt->ntt"
timeout 200 taskset -c $CPUS python3 bench/kernels_gpu.py $R/ab --sets n16d4,n16,n14 --l2-group-mib 0 --reps 40 --ops "$OPS" --ntt-variants "$V" > $R/ab.log 2>&1; echo "ab rc $?" >> $R/env.txt
timeout 330 python3 -m pytest -m gpu -q -rs tests/ckks tests/interop tests/kernels > $R/gpu_suite_part1.log 2>&1; echo "part1 rc $?" >> $R/env.txt
date >> $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
