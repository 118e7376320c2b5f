"""Example 18's eager / replay ratio in many paired rounds: the 8x8 matvec at N=2^14
(``hoisted=False``), ``replay(ct)`` with its input copy against the eager call, both timed in
each round (``bench._timing.paired_ratio``: 10 samples each, a Python loop timed beside them),
24 rounds, one process. Run it pinned (``taskset -c "$(python3 bench/quiet_cpu.py --count 2)"``)
for the quickest host, where the ratio is lowest.

Usage, from the repository root: python3 bench/results/2026-11-30-s19/paired.py
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench._example18 import example18  # noqa: E402
from bench._timing import cuda_sync, paired_ratio  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402


def main() -> None:
    _, _, ct, fn, _ = example18()
    program = CudaGraphProgram.capture(fn, example_inputs=(ct,))
    result = paired_ratio(lambda: fn(ct), lambda: program.replay(ct), rounds=24, runs=10, synchronize=cuda_sync)
    print(f"cpus {sorted(os.sched_getaffinity(0))}")
    for i, row in enumerate(result["rounds"]):
        print(f"round {i:2d} loop {row['host_loop_us']:7.1f} us eager {row['slow_ms']:.3f} ms "
              f"replay {row['fast_ms']:.3f} ms ratio {row['ratio']:.2f}x")
    ratios = [row["ratio"] for row in result["rounds"]]
    print(f"ratio median {result['median_ratio']:.2f}x min {result['min_ratio']:.2f}x max {result['max_ratio']:.2f}x "
          f"mean {statistics.fmean(ratios):.2f}x; rounds below 5x: {sum(r < 5 for r in ratios)} of {len(ratios)}")


if __name__ == "__main__":
    main()
