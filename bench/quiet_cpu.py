"""Print the CPUs of this machine that run the interpreter fastest now, for ``taskset -c``.

On a shared host the vCPUs do not run at one speed: the H200 machines run the same Python loop
in ~0.95 ms on some and ~1.7 ms on others, and a process moves between them
(``bench/results/2026-11-30-s19/host_mode/``). A host-bound timing (an eager call, ``replay()``'s
overhead) follows the CPU it ran on, so a benchmark pinned to the quickest CPUs measures the
host at its best: the lowest eager/graph ratio and the lowest host overheads of a run.

Usage: taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/run_all.py ...
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._timing import host_loop_us  # noqa: E402


def quickest(count: int, cpus: list[int]) -> list[tuple[int, float]]:
    """``(cpu, host_loop_us)`` of the ``count`` quickest of ``cpus``, quickest first; this
    process's affinity is restored afterwards."""
    before = os.sched_getaffinity(0)
    try:
        times = []
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            times.append((cpu, host_loop_us(runs=5)))
    finally:
        os.sched_setaffinity(0, before)
    return sorted(times, key=lambda item: item[1])[:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1, help="how many CPUs to print (default 1)")
    args = parser.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    if not 1 <= args.count <= len(cpus):
        parser.error(f"--count must be 1..{len(cpus)}")
    best = quickest(args.count, cpus)
    print(",".join(str(cpu) for cpu, _ in best))
    print(" ".join(f"cpu {cpu}: {us:.0f} us" for cpu, us in best), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
