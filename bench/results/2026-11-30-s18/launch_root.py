"""Why does example 18's graph launch cost more host time without the diagonals' head copy?

Runs on change 45's tree (the seventeenth session's 0233e78 + 4221e12 on this session's code:
``engine._q_limbs`` reads the Q limbs in place). Captures FHElium's example 18 (8x8 matvec,
N=2^14, ``hoisted=False``) five ways and times ``Graph.launch`` on the host (the device
drained before every launch, and every 8 launches) and the graph on the device:

  copy:        the Q limbs copied per call at the head (what the current code does);
  view:        read in place: the seven branches are the graph's roots;
  view+fill:   read in place, one small fill kernel before the fork (a single short root);
  view+copy8M: read in place, an unused 8.4 MB device copy before the fork (a root as long
               as the head copy, its result not read);
  view+spin:   read in place, one one-thread kernel spinning ~8 us before the fork.

If the launch is cheap whenever a long root holds the branches back, the host cost comes
from the branches running while the host is still submitting the graph.

``sweep`` (second run): the root's kind and length: a memset node, a CuPy elementwise
kernel on 64 words, and the spin kernel for 0 .. 4000 ns.

Usage, from the repository root: python3 bench/results/2026-11-30-s18/launch_root.py [sweep]
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import alternate, copying, example18, graph_device_us, launch_host_us  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402

SPIN = cupy.RawKernel(
    r"""extern "C" __global__ void spin_ns(long long ns) {
        long long start = clock64();  // ~1.98 GHz SM clock: ns * 2 cycles
        while (clock64() - start < 2 * ns) { }
    }""",
    "spin_ns",
)


def main() -> None:
    engine, _, ct, fn, ref = example18()
    in_place = engine._q_limbs
    backend_type = type(engine.backend)
    original = backend_type.run_independent
    small = cupy.zeros(64, dtype=cupy.uint64)
    src = cupy.ones(8 * 8 * 2**14, dtype=cupy.uint64)  # 8.4 MB, as the head copy
    dst = cupy.empty_like(src)

    def rooted(head):
        def run(self, tasks) -> None:
            head()
            original(self, tasks)
        return run

    if sys.argv[1:] == ["sweep"]:
        heads = {"view+memset": lambda: small.fill(0), "view+add": lambda: small.__iadd__(1)}
        for ns in (0, 500, 1000, 2000, 4000):
            heads[f"view+spin{ns}"] = partial(SPIN, (1,), (1,), (np.int64(ns),))
    else:
        heads = {
            "view+fill": lambda: small.fill(0),
            "view+copy8M": lambda: cupy.copyto(dst, src),
            "view+spin": lambda: SPIN((1,), (1,), (np.int64(8000),)),
        }
    programs = {}
    for name in ("copy", "view", *heads):
        engine._q_limbs = copying(in_place) if name == "copy" else in_place
        backend_type.run_independent = rooted(heads[name]) if name in heads else original
        try:
            programs[name] = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        finally:
            engine._q_limbs = in_place
            backend_type.run_independent = original
        got = programs[name].replay(ct, copy_output=True, synchronize=True).data.get()
        assert np.array_equal(got, ref), name
        print(f"{name}: captured, replay bit-identical to eager", flush=True)

    stream = cupy.cuda.Stream(non_blocking=True)

    def measure(key: str) -> float:
        name, what = key.split()
        graph = programs[name].cuda_graph
        return graph_device_us(graph, stream) if what == "device" else launch_host_us(graph, stream, int(what[7:]))

    alternate([f"{n} {w}" for n in programs for w in ("launch/1", "launch/8", "device")], 4, measure)


if __name__ == "__main__":
    main()
