"""Where the eager call's run-to-run spread comes from: example 18 (8x8 matvec, N=2^14,
``hoisted=False``) eager host time and ``replay()`` latency, medians of 30 after 3 warmups,
in one fresh process per call. ``eager_noise.py run [--no-gc]`` measures once; ``eager_noise.py``
alone starts six processes (three with the garbage collector on, three off, alternated,
each pinned to CPU ``i % cores`` with ``taskset``) and prints each one's line.

Usage, from the repository root: python3 bench/results/2026-11-30-s18/eager_noise.py
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run(no_gc: bool) -> None:
    sys.path.insert(0, str(ROOT))
    from bench._example18 import example18
    from bench._timing import cuda_sync, time_host
    from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

    _, _, ct, fn, _ = example18()
    program = CudaGraphProgram.capture(fn, example_inputs=(ct,))
    if no_gc:
        gc.collect()
        gc.disable()
    eager = time_host(lambda: fn(ct), runs=30, warmup=3, synchronize=cuda_sync)["median_ms"]
    graph = time_host(lambda: program.replay(ct), runs=30, warmup=3, synchronize=cuda_sync)["median_ms"]
    print(f"cpu {sorted(os.sched_getaffinity(0))} gc {'off' if no_gc else 'on '} eager {eager:.3f} ms "
          f"replay {graph:.3f} ms ratio {eager / graph:.2f}x", flush=True)


def main() -> None:
    cores = os.cpu_count() or 1
    for i in range(6):
        cmd = ["taskset", "-c", str((5 * i) % cores), sys.executable, __file__, "run"] + (["--no-gc"] if i % 2 else [])
        subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        run("--no-gc" in sys.argv)
    else:
        main()
