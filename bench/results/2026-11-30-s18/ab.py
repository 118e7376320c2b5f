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
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._timing import cuda_sync, device_median_us, time_host, time_host_pipelined  # noqa: E402
from fhelium_cupy.ckks import CkksEngine, encode_diagonals, matrix_vector, periodic_message, required_rotation_steps  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402


def main() -> None:
    engine = CkksEngine("slots8192-scale40-depth7", device="cuda")
    engine.generate_keys()
    rng = np.random.default_rng(0)
    a, x = rng.uniform(-1, 1, (8, 8)), rng.uniform(-1, 1, 8)
    ct = engine.encrypt_message(periodic_message(x, engine.num_slots))
    fn = partial(matrix_vector, engine=engine, diagonals=encode_diagonals(engine, a),
                 rotation_keys=engine.rotation_keys(required_rotation_steps(8)), hoisted=False)
    ref = fn(ct).data.get()

    backend = engine.backend
    in_place, launch = engine._q_limbs, backend._launch

    def no_root(name, *args, **kwargs):
        if name != "graph_fork_root":
            launch(name, *args, **kwargs)

    def copied(pt):  # drop_special_primes before the change (it now calls _q_limbs itself)
        q = in_place(pt)
        return q._with_data(cupy.ascontiguousarray(q.data))

    variants = {"old": (copied, no_root), "new": (in_place, launch), "view": (in_place, no_root)}

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
    results: dict = {}
    keys = [(n, w) for n in variants for w in ("eager_ms", "device_us", "launch1_us", "launch8_us", "prepared8_us")]
    for r in range(4):
        for name, what in keys if r % 2 == 0 else keys[::-1]:
            graph = programs[name].cuda_graph
            if what == "eager_ms":
                use(name)
                value = time_host(lambda: fn(ct), runs=30, warmup=3, synchronize=cuda_sync)["median_ms"]
                use("new")
            elif what == "device_us":
                value = device_median_us(lambda g=graph: g.launch(stream), runs=40, warmup=3, stream=stream)
            elif what.startswith("launch"):
                value = time_host_pipelined(lambda g=graph: g.launch(stream), runs=256, warmup=16,
                                            drain=stream.synchronize, every=int(what[6]))["median_us"]
            else:
                value = time_host_pipelined(programs[name].replay_prepared, runs=256, warmup=16, drain=drain,
                                            every=8)["median_us"]
            results.setdefault(f"{name} {what}", []).append(round(value, 3))
    for key, values in results.items():
        print(f"{key:<20} {values} median {statistics.median(values):.3f}", flush=True)
    for name in variants:
        eager, graph = (statistics.median(results[f"{name} {w}"]) for w in ("eager_ms", "device_us"))
        print(f"{name}: eager / graph = {eager * 1e3 / graph:.2f}x", flush=True)


if __name__ == "__main__":
    main()
