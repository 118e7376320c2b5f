"""The two ad-hoc probes of this session's records, merged after the runs into one script
(one setup; the measurements are the ones that ran).

  knobs:  example 18's graph over FHE_BRANCH_STREAMS 4 / 7 / 8 crossed with the `_v4` chunk
          kernels and the `_x2` column kernels off (host attributes), two orders
          (`streams/probe.log`).
  memory: streams 1 against 8 at N=2^14 and N=2^16: graph time, eager peak (a fresh CuPy
          pool), graph arena; and the default matvec captured (`n16/probe16.log`).

Usage, from the repository root: OUT=dir python3 bench/results/2026-11-30-s16/probes.py knobs|memory
"""

from __future__ import annotations

import gc
import json
import os
import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench._timing import device_median_us  # noqa: E402
from fhelium_cupy.ckks import (  # noqa: E402
    CkksEngine,
    encode_diagonals,
    matrix_vector,
    periodic_message,
    required_rotation_steps,
)
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402


def setup(preset: str):
    """The 8x8 matvec of `bench/matvec_gpu_quick.py` on `preset`: (engine, A, x, ct, schedule)."""
    engine = CkksEngine(preset, device="cuda")
    engine.generate_keys()
    rng = np.random.default_rng(0)
    a, x = rng.uniform(-1, 1, (8, 8)), rng.uniform(-1, 1, 8)
    keys = engine.rotation_keys(required_rotation_steps(8))
    ct = engine.encrypt_message(periodic_message(x, engine.num_slots))
    schedule = partial(matrix_vector, engine=engine, diagonals=encode_diagonals(engine, a), rotation_keys=keys)
    return engine, a, x, ct, schedule


def graph(fn, ct, runs: int):
    """(replay median us, replay == eager bit for bit, arena reserved bytes)."""
    program = CudaGraphProgram.capture(fn, example_inputs=(ct,))
    try:
        same = bool(np.array_equal(program.replay(ct, copy_output=True, synchronize=True).data.get(),
                                   fn(ct).data.get()))
        return device_median_us(partial(program.replay, ct), runs=runs, warmup=3), same, program._arena.reserved_bytes
    finally:
        program.close()


def knobs(res: dict) -> None:
    engine, _, _, ct, schedule = setup("slots8192-scale40-depth7")
    fn, be = partial(schedule, hoisted=False), engine.backend
    variants = [(s, v4, x2) for s in (4, 7, 8) for v4 in (11, 0) for x2 in (2, 0)]
    for order in (variants, variants[::-1]):
        for s, v4, x2 in order:
            be._branch_streams, be._ntt_v4_max_log_chunk, be._ntt_column_x2 = s, v4, x2
            eager = device_median_us(partial(fn, ct), runs=20, warmup=3)
            g, same, _ = graph(fn, ct, 30)
            key = f"streams={s} v4max={v4} x2={x2}"
            res.setdefault(key, []).append((round(eager, 1), round(g, 1), same))
            print(f"{key:<28} eager {eager:8.1f} graph {g:7.1f} same {same}", flush=True)


def memory(res: dict) -> None:
    import cupy

    for preset in ("slots8192-scale40-depth7", "slots32768-scale40-depth33-dnum4"):
        engine, a, x, ct, schedule = setup(preset)
        g, same, _ = graph(schedule, ct, 20)
        err = float(np.max(np.abs(engine.decrypt_message(schedule(ct), real=True)
                                  - periodic_message(a @ x, engine.num_slots))))
        res[f"{preset} default"] = {"eager_us": round(device_median_us(partial(schedule, ct), runs=10, warmup=2), 1),
                                    "graph_us": round(g, 1), "graph_equals_eager": same, "err": err}
        print(preset, "default", res[f"{preset} default"], flush=True)
        fn = partial(schedule, hoisted=False)
        for streams in (1, 8, 8, 1):
            engine.backend._branch_streams = streams
            fn(ct)
            pool = cupy.cuda.MemoryPool()
            with cupy.cuda.using_allocator(pool.malloc):
                out = fn(ct)
                cupy.cuda.Device().synchronize()
                eager_peak = pool.total_bytes()
            del out
            gc.collect()
            pool.free_all_blocks()
            eager = device_median_us(partial(fn, ct), runs=10, warmup=2)
            g, same, arena = graph(fn, ct, 20)
            key = f"{preset} streams={streams}"
            res.setdefault(key, []).append({"eager_us": round(eager, 1), "graph_us": round(g, 1),
                                            "eager_peak_MiB": round(eager_peak / 2**20, 1),
                                            "arena_MiB": round(arena / 2**20, 1), "graph_equals_eager": same})
            print(key, res[key][-1], flush=True)


if __name__ == "__main__":
    which = sys.argv[1]
    results: dict = {}
    {"knobs": knobs, "memory": memory}[which](results)
    (Path(os.environ["OUT"]) / f"probe_{which}.json").write_text(json.dumps(results, indent=1))
