"""Where the host time of one eager call goes: the N=2^14 double-hoisted 8-diagonal matvec.

An eager call is host-bound when its Python work outlasts its kernels (the matvec: ~0.12 ms
of kernels in 10 launches, ~0.26 ms per call on a quiet host; README "Results on the H200"). This times the call back to back on the host
(``bench._timing.time_host_pipelined``: no wait in the timed region), then runs it under
cProfile and prints the functions by own time and by cumulative time. Not a benchmark of
the GPU: use it to find host work to cut and compare before/after in one run.

Usage: PYTHONPATH=$PWD python3 bench/eager_host_profile.py [OUT_DIR] [--calls 200]
Writes eager_host_profile.txt into OUT_DIR (default $OUT or ./bench_out).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
from functools import partial
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import exit_without_gpu  # noqa: E402  (after the sys.path entry above)
from bench._timing import cuda_sync, time_host_pipelined  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path(os.environ.get("OUT", "bench_out")))
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    exit_without_gpu("eager_host_profile.py")
    from fhelium_cupy._demo import MatvecWorkload

    workload = MatvecWorkload.build(preset="slots8192-scale40-depth7", device="cuda", size=8, insecure=False,
                                    method="hoisted", show_progress=False)  # matrix_vector's default schedule
    _, ct = workload.new_input()
    call = partial(workload.schedule, ct)
    lines = []
    for trial in range(3):  # back to back, drained (untimed) every 64 calls: host time, not device time
        host = time_host_pipelined(call, runs=args.calls, warmup=10, drain=cuda_sync)
        lines.append(f"trial {trial}: host {host['median_us']:.1f} us per call (median of {args.calls})")
    profile = cProfile.Profile()
    for i in range(args.calls):
        profile.runcall(call)
        if i % 64 == 63:  # drained outside the profile, as in the timed trials: a full queue is not host work
            cuda_sync()
    cuda_sync()
    for key, limit in (("tottime", 40), ("cumulative", 40)):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(key).print_stats(limit)
        lines.append(text.getvalue())
    report = "\n".join(lines)
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "eager_host_profile.txt").write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
