cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
CPUS=$(python3 bench/quiet_cpu.py --count 2)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date; echo "cpus $CPUS"; echo "tree $(cat ../TREE)";
  python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; } > $R/env.txt 2>&1
timeout 200 python3 -m pytest -m gpu -q tests/kernels/test_cupy_backend_gpu.py -k "side_stream or keyswitch" > $R/gpu_ks_tests.log 2>&1; echo "ks tests rc $?" >> $R/env.txt
V="on=;off=-DFHE_MODDOWN_OVERLAP=0;full=-DFHE_MODDOWN_KIP_BLOCKS=0;on2=;off2=-DFHE_MODDOWN_OVERLAP=0;full2=-DFHE_MODDOWN_KIP_BLOCKS=0"
OPS="keyswitch_from_digits ntt-domain,rotation hoisted,keyswitch_from_digits_many ntt-domain"
timeout 330 taskset -c $CPUS python3 bench/kernels_gpu.py $R/ab --sets n16d4,n16 --l2-group-mib 0 --reps 40 --ops "$OPS" --ntt-variants "$V" --priority off,on > $R/ab.log 2>&1; echo "ab rc $?" >> $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
