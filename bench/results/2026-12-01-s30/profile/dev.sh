set -u
cd new
R=$OUT/x; mkdir -p $R
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cupy, numpy, torch, sys; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0]); print('cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"; date -u; echo "tree $(cat ../TREE)"; which ncu; } > $R/env.txt 2>&1
timeout 120 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --log-file $R/ncu_rotation16.csv python3 bench/profile_kernels.py rotation16 > $R/ncu.log 2>&1; echo "ncu rc $?" >> $R/env.txt
python3 bench/profile_kernels.py --summarize $R/ncu_rotation16.csv > $R/profile_rotation16.md 2>&1
cat $R/profile_rotation16.md
timeout 200 ncu --profile-from-start off --clock-control none -k regex:ntt_ --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats --section LaunchStats --log-file $R/ncu_ntt16_sections.txt python3 bench/profile_kernels.py ntt16 > $R/ncu2.log 2>&1; echo "ncu2 rc $?" >> $R/env.txt
grep -E "ntt_|Duration|Throughput|Achieved Occupancy|Theoretical Occupancy|Registers|Issue Slots Busy|Executed Ipc|Stall|No Eligible|Block Limit" $R/ncu_ntt16_sections.txt | head -80
cat $R/env.txt
cd $OUT && tar czf x.tgz x && rm -rf x
