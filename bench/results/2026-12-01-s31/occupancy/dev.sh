set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; } > $R/env.txt 2>&1
S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats"
for v in "f64:" "main:-DFHE_NTT_F64_CHUNK=0" "c100:-DFHE_NTT_F64_CARVEOUT=100"; do
  name=${v%%:*}; defs=${v#*:}
  PROBE_DEFINES="$defs" timeout 100 ncu --profile-from-start off --clock-control none -k regex:chunk_stages $S --log-file $R/ncu_$name.txt python3 probe_ntt.py > $R/ncu_$name.log 2>&1; echo "ncu $name rc $?" >> $R/env.txt
  grep -E "chunk_stages|Duration|Registers Per|Block Limit (Registers|Shared Mem)|Theoretical Occ|Achieved Occ|Warp Cycles Per Issued|Shared Memory Configuration Size|Dynamic Shared Memory Per Block|Driver Shared" $R/ncu_$name.txt | sed 's/  */ /g' | cut -c1-110
done
timeout 150 python3 bench/kernels_gpu.py $R/ab --sets n16d4 --l2-group-mib 0 --reps 30 --ops ntt_forward,ntt_inverse,rotation --ntt-variants "f64=;c100=-DFHE_NTT_F64_CARVEOUT=100;main=-DFHE_NTT_F64_CHUNK=0;c100b=-DFHE_NTT_F64_CARVEOUT=100;f64b=" > $R/ab.log 2>&1; echo "ab rc $?" >> $R/env.txt
grep -E "ntt_forward\(ct\)|ntt_inverse\(ct\)|rotation hoisted" $R/ab.log | cut -c1-170
cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
