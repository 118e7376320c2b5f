"""The fork root's cost where the fork is not the graph's first work: a 64 x 64 BSGS matvec
(N=2^14; its giant steps fork after the baby steps) captured with ``graph_fork_root`` before
the giant steps' fork (``root``, the code) and without it (``none``), four rounds alternated:
graph device us and ``Graph.launch`` host us.

Usage, from the repository root: python3 bench/results/2026-11-30-s18/bsgs_ab.py
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import alternate, graph_device_us, launch_host_us, without_fork_root  # noqa: E402
from fhelium_cupy.ckks import (  # noqa: E402
    CkksEngine,
    encode_bsgs_diagonals,
    matrix_vector_bsgs,
    periodic_message,
    required_rotation_steps_bsgs,
)
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402


def main() -> None:
    engine = CkksEngine("slots8192-scale40-depth7", device="cuda")
    engine.generate_keys()
    rng = np.random.default_rng(0)
    n = 64
    a, x = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, n)
    ct = engine.encrypt_message(periodic_message(x, engine.num_slots))
    fn = partial(matrix_vector_bsgs, engine=engine, diagonals=encode_bsgs_diagonals(engine, a),
                 rotation_keys=engine.rotation_keys(required_rotation_steps_bsgs(n)))
    ref = fn(ct).data.get()
    backend = engine.backend
    launch = backend._launch
    programs = {}
    for name, use in (("root", launch), ("none", without_fork_root(launch))):
        backend._launch = use
        try:
            programs[name] = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        finally:
            backend._launch = launch
        assert np.array_equal(programs[name].replay(ct, copy_output=True, synchronize=True).data.get(), ref), name

    stream = cupy.cuda.Stream(non_blocking=True)

    def measure(key: str) -> float:
        name, what = key.split()
        graph = programs[name].cuda_graph
        return graph_device_us(graph, stream) if what == "device_us" else launch_host_us(graph, stream, 8)

    alternate([f"{n} {w}" for n in programs for w in ("device_us", "launch8_us")], 4, measure)


if __name__ == "__main__":
    main()
