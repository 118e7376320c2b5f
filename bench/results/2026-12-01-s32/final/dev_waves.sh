set -u
R=$OUT/x; mkdir -p $R
cd new3
export PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; echo "tree $(cat ../TREE3) + probe_waves.py"; } > $R/env.txt 2>&1
timeout 200 python3 bench/results/2026-12-01-s32/final/probe_waves.py $R/waves.json > $R/waves.log 2>&1; echo "waves rc $?" >> $R/env.txt
cat $R/waves.log | tail -30
cd $OUT && tar czf x.tgz x && rm -rf x
