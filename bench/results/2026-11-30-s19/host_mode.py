"""Which host work the eager call's slow mode slows down (perf notes round 24).

Example 18's eager call takes 1.5-1.6 ms in some processes and 2.6-3.0 ms in others
(`2026-11-30-s18/eager_noise/`). Each fresh process here measures, before anything else and
again after example 18 is built: a pure-Python loop, a CuPy ``RawKernel`` launch of an empty
kernel (host µs, issued back to back), an event record; then example 18's eager call and
``replay()`` (medians of 30 after 3 warmups), and a cProfile of 20 eager calls (the 12
functions with the most own time). ``host_mode.py`` alone starts eight processes, half with
``PYTHONHASHSEED=0``, half with a random seed, so the lines say whether the mode follows the
interpreter (Python loop), the driver (launch, record) or the hash seed.

Usage, from the repository root: python3 bench/results/2026-11-30-s19/host_mode.py
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _median_us(fn, runs: int = 30) -> float:
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e6)
    return statistics.median(samples)


def _micro(cupy, kernel, stream) -> str:
    loop = _median_us(lambda: sum(i * i for i in range(20000)))

    def launches() -> None:
        for _ in range(64):
            kernel((1,), (1,), (), stream=stream)

    launch = _median_us(launches, runs=20) / 64
    stream.synchronize()
    event = cupy.cuda.Event(disable_timing=True)
    record = _median_us(lambda: [event.record(stream) for _ in range(64)], runs=20) / 64
    stream.synchronize()
    return f"py-loop {loop:7.1f} us  launch {launch:5.2f} us  event-record {record:5.2f} us"


def run() -> None:
    sys.path.insert(0, str(ROOT))
    import cupy

    from bench._example18 import example18
    from bench._timing import cuda_sync, time_host
    from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

    kernel = cupy.RawKernel('extern "C" __global__ void noop() {}', "noop")
    stream = cupy.cuda.Stream(non_blocking=True)
    tag = f"pid {os.getpid()} seed {os.environ.get('PYTHONHASHSEED', '-'):>6}"
    print(f"{tag} before: {_micro(cupy, kernel, stream)}", flush=True)
    _, _, ct, fn, _ = example18()
    program = CudaGraphProgram.capture(fn, example_inputs=(ct,))
    eager = time_host(lambda: fn(ct), runs=30, warmup=3, synchronize=cuda_sync)["median_ms"]
    graph = time_host(lambda: program.replay(ct), runs=30, warmup=3, synchronize=cuda_sync)["median_ms"]
    print(f"{tag} after:  {_micro(cupy, kernel, stream)}  eager {eager:.3f} ms replay {graph:.3f} ms "
          f"ratio {eager / graph:.2f}x", flush=True)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(20):
        fn(ct)
    cuda_sync()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
    lines = [line for line in text.getvalue().splitlines() if line.strip()]
    print("\n".join(f"{tag}   {line}" for line in lines[3:22]), flush=True)


def main() -> None:
    for i in range(8):
        seed = "0" if i % 2 == 0 else str(int.from_bytes(os.urandom(2), "little"))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, __file__, "run"], check=True, env=env)


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        run()
    else:
        main()
