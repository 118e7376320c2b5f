cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
CPUS=$(python3 bench/quiet_cpu.py --count 2)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date; echo "cpus $CPUS"; echo "tree $(cat ../TREE)";
  python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; } > $R/env.txt 2>&1
timeout 60 python3 -m pytest -m gpu -q -rs tests/runtime tests/test_*.py > $R/gpu_suite_part2.log 2>&1; echo "part2 rc $?" >> $R/env.txt
timeout 240 taskset -c $CPUS python3 bench/kernels_gpu.py $R/k --sets n14,n16d4 --l2-group-mib 0 > $R/k.log 2>&1; echo "k rc $?" >> $R/env.txt
timeout 100 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --log-file $R/ncu_rotation16.csv python3 bench/profile_kernels.py rotation16 > $R/ncu.log 2>&1; echo "ncu rc $?" >> $R/env.txt
python3 bench/profile_kernels.py --summarize $R/ncu_rotation16.csv > $R/profile_rotation16.md 2>&1
date >> $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
