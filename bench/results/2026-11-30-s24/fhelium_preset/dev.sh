cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
CPUS=$(python3 bench/quiet_cpu.py --count 2)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date; echo "cpus $CPUS"; echo "tree $(cat ../TREE)";
  python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; } > $R/env.txt 2>&1
for preset in slots32768-scale40-depth34 slots32768-scale40-depth33-dnum4; do
  timeout 200 taskset -c $CPUS python3 bench/matvec_gpu_quick.py $R/$preset --n16 $preset > $R/$preset.log 2>&1; echo "$preset rc $?" >> $R/env.txt
done
cd $OUT && tar czf x.tgz x && rm -rf x
