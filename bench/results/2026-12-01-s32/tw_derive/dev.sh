set -u
cd new2
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE2)"; nproc; } > $R/env.txt 2>&1
timeout 300 python3 bench/kernels_gpu.py $R/ab --sets n16d4,n14 --l2-group-mib 0 --reps 30 --ntt-variants "d0=-DFHE_NTT_TW_DERIVE=0;d1=-DFHE_NTT_TW_DERIVE=1;d2=-DFHE_NTT_TW_DERIVE=2;d0b=-DFHE_NTT_TW_DERIVE=0;d1b=-DFHE_NTT_TW_DERIVE=1;d2b=-DFHE_NTT_TW_DERIVE=2" > $R/ab.log 2>&1; echo "ab rc $?" >> $R/env.txt
tail -n 60 $R/ab.log
timeout 260 python3 -m pytest -m gpu -q -rs tests/kernels > $R/tests_d1.log 2>&1; echo "rc $?" >> $R/tests_d1.log
tail -n 5 $R/tests_d1.log
cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
