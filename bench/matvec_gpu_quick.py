"""Quick GPU timing of the 8-diagonal encrypted matvec (N=2^14) and one N=2^16 rotation check.

Usage: PYTHONPATH=$PWD python3 bench/matvec_gpu_quick.py [OUT_DIR] [--reps 30] [--n16 PRESET|none]
       [--fill F,..] [--branches B,..] [--bsgs N]

* matvec: ``matrix_vector`` as FHElium's independent rotations (``hoisted=False``),
  single-hoisted (Q-basis diagonals) and double-hoisted (QP-basis diagonals, the default),
  eager (CUDA events around the Python call) and captured with ``CudaGraphProgram.capture``
  (events around ``program.replay``), median over reps; checks graph == eager bit for bit
  and reports each schedule's max decryption error against A x. ``--branches 1,4,7`` also
  times the independent schedule with its rotations over that many streams (the backend's
  ``branch_streams``, side by side in one run) and checks every count's result bit for bit.
* bsgs (``--bsgs N``): ``matrix_vector_bsgs`` of an N x N matrix, its giant steps over the
  ``--branches`` counts (default: the backend's), eager and graph, bit-identical across counts.
* n16: one ``rotate_with_key`` on the GPU engine of the given preset, decrypted against
  ``numpy.roll`` (precision check of the preset), and its eager/graph time.
Writes matvec_gpu_quick.json into OUT_DIR (default $OUT or ./bench_out).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import emit_json, exit_without_gpu, positive_int  # noqa: E402
from bench._timing import device_median_us  # noqa: E402  (after the sys.path entry above)


def _graph(fn, ct, eager_data, reps: int) -> tuple[bool, float]:
    """Capture ``fn(ct)``: (its replay equals ``eager_data`` bit for bit, replay median us)."""
    from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

    program = CudaGraphProgram.capture(fn, example_inputs=(ct,))
    try:
        same = bool(np.array_equal(program.replay(ct, copy_output=True, synchronize=True).data.get(), eager_data))
        return same, device_median_us(partial(program.replay, ct), runs=reps, warmup=3)
    finally:
        program.close()


def _over_streams(engine, fn, ct, counts: tuple[int, ...], reps: int, extra=None) -> dict[int, dict]:
    """``fn(ct)`` with the backend's ``branch_streams`` at each count (side by side, one
    engine): per count the eager and graph median us and whether the graph and the eager call
    equal the first count's result bit for bit; ``extra(eager_ct)`` adds entries of its own.
    The backend's count is restored."""
    backend = engine.backend
    default, reference, out = backend.branch_streams, None, {}
    try:
        for branches in counts:
            backend.branch_streams = branches
            eager_ct = fn(ct)
            data = eager_ct.data.get()
            reference = data if reference is None else reference
            entry = dict(extra(eager_ct)) if extra is not None else {}
            eager = device_median_us(partial(fn, ct), runs=reps, warmup=3)
            same, graph = _graph(fn, ct, data, reps)
            entry.update(eager_us=round(eager, 1), graph_us=round(graph, 1),
                         bit_identical=same and bool(np.array_equal(data, reference)))
            out[branches] = entry
    finally:
        backend.branch_streams = default
    return out


def matvec(cp, reps: int, fills: tuple[int, ...] = (), branch_counts: tuple[int, ...] = ()) -> dict:
    from fhelium_cupy.ckks import CkksEngine, encode_diagonals, matrix_vector, periodic_message, required_rotation_steps

    engine = CkksEngine("slots8192-scale40-depth7", device="cuda")
    engine.generate_keys()
    n = 8
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n))
    x = rng.uniform(-1, 1, n)
    keys = engine.rotation_keys(required_rotation_steps(n))
    diags = encode_diagonals(engine, a)  # QP basis: double hoisting when hoisted
    q_diags = encode_diagonals(engine, a, modulus_basis="Q")
    ct = engine.encrypt_message(periodic_message(x, engine.num_slots))
    want = periodic_message(a @ x, engine.num_slots)
    out: dict = {"preset": "slots8192-scale40-depth7", "n": n}
    schedules = (("independent", False, diags), ("hoisted", True, q_diags), ("double_hoisted", True, diags))
    for key, hoisted, d in schedules:
        fn = partial(matrix_vector, engine=engine, diagonals=d, rotation_keys=keys, hoisted=hoisted)
        eager_ct = fn(ct)
        err = float(np.max(np.abs(engine.decrypt_message(eager_ct, real=True) - want)))
        before = engine.backend.launch_count
        fn(ct)
        launches = engine.backend.launch_count - before
        eager = device_median_us(partial(fn, ct), runs=reps, warmup=3)
        same, graph = _graph(fn, ct, eager_ct.data.get(), reps)
        out[key] = {"launches": launches, "eager_us": round(eager, 1), "graph_us": round(graph, 1),
                    "max_err": err, "graph_equals_eager": same}
        print(f"matvec n=8 N=2^14 {key:<14} launches {launches:>4} eager {eager:8.1f} us graph {graph:8.1f} us "
              f"err {err:.2e} graph==eager {same}", flush=True)
    default_fill = engine.backend.ntt_fill_blocks
    for fill in fills:  # the hoisted matvec with other NTT chunk choices (side by side, same run)
        engine.backend.ntt_fill_blocks = fill
        fn = partial(matrix_vector, engine=engine, diagonals=diags, rotation_keys=keys)
        same, graph = _graph(fn, ct, fn(ct).data.get(), reps)
        out[f"hoisted_fill_{fill}"] = {"graph_us": round(graph, 1), "graph_equals_eager": same}
        print(f"matvec n=8 N=2^14 hoisted ntt_fill_blocks={fill:<5} graph {graph:8.1f} us graph==eager {same}",
              flush=True)
    engine.backend.ntt_fill_blocks = default_fill
    independent = partial(matrix_vector, engine=engine, diagonals=diags, rotation_keys=keys, hoisted=False)
    for branches, r in _over_streams(engine, independent, ct, branch_counts, reps).items():
        out[f"independent_streams_{branches}"] = r
        print(f"matvec n=8 N=2^14 independent streams={branches:<3} eager {r['eager_us']:8.1f} us graph "
              f"{r['graph_us']:8.1f} us graph==eager==first {r['bit_identical']}", flush=True)
    return out


def bsgs(cp, reps: int, n: int, branch_counts: tuple[int, ...]) -> dict:
    """``matrix_vector_bsgs`` of an n x n matrix at N=2^14 with its giant steps over each stream
    count (side by side, one engine): eager and graph time, bit-identical across counts."""
    from fhelium_cupy.ckks import (
        CkksEngine,
        bsgs_split,
        encode_bsgs_diagonals,
        matrix_vector_bsgs,
        periodic_message,
        required_rotation_steps_bsgs,
    )

    engine = CkksEngine("slots8192-scale40-depth7", device="cuda")
    engine.generate_keys()
    rng = np.random.default_rng(1)
    a, x = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, n)
    fn = partial(matrix_vector_bsgs, engine=engine, diagonals=encode_bsgs_diagonals(engine, a),
                 rotation_keys=engine.rotation_keys(required_rotation_steps_bsgs(n)))
    ct = engine.encrypt_message(periodic_message(x, engine.num_slots))
    want = periodic_message(a @ x, engine.num_slots)
    out: dict = {"preset": "slots8192-scale40-depth7", "n": n, "baby_giant": list(bsgs_split(n))}
    def stats(eager_ct) -> dict:
        before = engine.backend.launch_count
        fn(ct)
        return {"launches": engine.backend.launch_count - before,
                "max_err": float(np.max(np.abs(engine.decrypt_message(eager_ct, real=True) - want)))}

    counts = branch_counts or (engine.backend.branch_streams,)
    for branches, r in _over_streams(engine, fn, ct, counts, reps, stats).items():
        out[f"streams_{branches}"] = r
        print(f"matvec_bsgs n={n} N=2^14 streams={branches:<3} launches {r['launches']:>4} eager "
              f"{r['eager_us']:8.1f} us graph {r['graph_us']:8.1f} us err {r['max_err']:.2e} "
              f"graph==eager==first {r['bit_identical']}", flush=True)
    return out


def rotation16(cp, preset: str, reps: int) -> dict:
    from fhelium_cupy.ckks import CkksEngine

    t = time.perf_counter()
    engine = CkksEngine(preset, device="cuda")
    engine.generate_keys()
    key = engine.rotation_key(1)
    rng = np.random.default_rng(1)
    m = rng.uniform(-1, 1, engine.num_slots)
    ct = engine.encrypt_message(m)
    setup_s = time.perf_counter() - t
    rot = engine.rotate_with_key(ct, key)
    err = float(np.max(np.abs(engine.decrypt_message(rot, real=True) - np.roll(m, 1))))
    eager = device_median_us(lambda: engine.rotate_with_key(ct, key), runs=reps, warmup=3)
    from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

    program = CudaGraphProgram.capture(partial(engine.rotate_with_key, key=key), example_inputs=(ct,))
    try:
        graph = device_median_us(lambda: program.replay(ct), runs=reps, warmup=3)
    finally:
        program.close()
    before = engine.backend.launch_count
    engine.rotate_with_key(ct, key)
    launches = engine.backend.launch_count - before
    p = engine.parameters
    print(f"rotation {preset} (L={len(p.q_moduli)}, K={len(p.p_moduli)}, dnum={p.dnum}) launches {launches} "
          f"eager {eager:.1f} us graph {graph:.1f} us err {err:.2e} setup {setup_s:.1f}s", flush=True)
    return {"preset": preset, "launches": launches, "eager_us": round(eager, 1), "graph_us": round(graph, 1),
            "max_err": err, "setup_s": round(setup_s, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", nargs="?", default=os.environ.get("OUT", "bench_out"))
    parser.add_argument("--reps", type=positive_int, default=30)
    parser.add_argument("--n16", default="slots32768-scale40-depth33-dnum4")
    parser.add_argument("--fill", default="", help="comma list of extra NTT fill-block thresholds for the hoisted matvec")
    parser.add_argument("--branches", default="",
                        help="comma list of stream counts (the backend's branch_streams) for the independent schedule")
    parser.add_argument("--bsgs", type=int, default=0,
                        help="also time matrix_vector_bsgs of this size n (0: no), over the --branches counts")
    args = parser.parse_args()
    exit_without_gpu("bench/matvec_gpu_quick.py")
    from fhelium_cupy.runtime.kernels import require_cuda

    cp = require_cuda()
    result = {"matvec": matvec(cp, args.reps, tuple(int(v) for v in args.fill.split(",") if v),
                               tuple(int(v) for v in args.branches.split(",") if v))}
    if args.bsgs:
        result["bsgs"] = bsgs(cp, args.reps, args.bsgs, tuple(int(v) for v in args.branches.split(",") if v))
    if args.n16 != "none":
        result["rotation_n16"] = rotation16(cp, args.n16, args.reps)
    emit_json(result, Path(args.out_dir) / "matvec_gpu_quick.json", echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
