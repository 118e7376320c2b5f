"""Change 46 side by side in one process: example 18 (8x8 matvec, N=2^14, ``hoisted=False``)
as the code before it ran (``old``: the diagonals' Q limbs copied per call at the graph's head,
no fork root) against the change (``new``: read in place, one ``graph_fork_root`` kernel before
the fork), and read in place without the root (``view``). Four rounds, alternated: eager host
ms, graph device us, ``Graph.launch`` host us (device drained before every launch, and every 8
launches), ``replay_prepared()`` host us (every 8).

Usage, from the repository root: python3 bench/results/2026-11-30-s18/ab.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import (  # noqa: E402
    alternate,
    copying,
    example18,
    graph_device_us,
    launch_host_us,
    without_fork_root,
)
from bench._timing import cuda_sync, time_host, time_host_pipelined  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402


def main() -> None:
    engine, _, ct, fn, ref = example18()
    backend = engine.backend
    in_place, launch = engine._q_limbs, backend._launch
    no_root = without_fork_root(launch)
    variants = {"old": (copying(in_place), no_root), "new": (in_place, launch), "view": (in_place, no_root)}

    def use(name: str) -> None:
        engine._q_limbs, backend._launch = variants[name]

    programs = {}
    for name in variants:
        use(name)
        programs[name] = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        assert np.array_equal(programs[name].replay(ct, copy_output=True, synchronize=True).data.get(), ref), name
        assert np.array_equal(fn(ct).data.get(), ref), name
    use("new")

    stream = cupy.cuda.Stream(non_blocking=True)
    drain = cupy.cuda.Device().synchronize

    def measure(key: str) -> float:
        name, what = key.split()
        graph = programs[name].cuda_graph
        if what == "eager_ms":
            use(name)
            value = time_host(lambda: fn(ct), runs=30, warmup=3, synchronize=cuda_sync)["median_ms"]
            use("new")
            return value
        if what == "device_us":
            return graph_device_us(graph, stream)
        if what.startswith("launch"):
            return launch_host_us(graph, stream, int(what[6]))
        return time_host_pipelined(programs[name].replay_prepared, runs=256, warmup=16, drain=drain,
                                   every=8)["median_us"]

    keys = [f"{n} {w}" for n in variants for w in ("eager_ms", "device_us", "launch1_us", "launch8_us", "prepared8_us")]
    results = alternate(keys, 4, measure, digits=3)
    for name in variants:
        eager, graph = (statistics.median(results[f"{name} {w}"]) for w in ("eager_ms", "device_us"))
        print(f"{name}: eager / graph = {eager * 1e3 / graph:.2f}x", flush=True)


if __name__ == "__main__":
    main()
