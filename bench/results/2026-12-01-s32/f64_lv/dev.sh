set -u
cd new2
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE2)"; nproc; } > $R/env.txt 2>&1
timeout 400 python3 bench/kernels_gpu.py $R/ab --sets n16d4,n14 --l2-group-mib 0 --reps 30 --ntt-variants "lv3=;l4m4=-DFHE_F64_LV=4 -DFHE_NTT_F64_CHUNK_MIN_BLOCKS=4;l4m3=-DFHE_F64_LV=4 -DFHE_NTT_F64_CHUNK_MIN_BLOCKS=3;lv3b=;l4m4b=-DFHE_F64_LV=4 -DFHE_NTT_F64_CHUNK_MIN_BLOCKS=4;l4m3b=-DFHE_F64_LV=4 -DFHE_NTT_F64_CHUNK_MIN_BLOCKS=3" > $R/ab.log 2>&1; echo "ab rc $?" >> $R/env.txt
grep -E "ntt_(forward|inverse)\(ct\)|rescale\(ct, ntt\)" $R/ab.log
cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
