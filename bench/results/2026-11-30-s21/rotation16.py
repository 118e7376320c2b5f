"""Change 50 side by side: one rotation's key switch in one pass (``rotate_keyswitch``, now also
for digits of several primes) against the hoisted two-call form it replaces in the engine's
``rotate_with_key`` (ModUp with the NTT hint, then ``keyswitch_from_digits_many``), one process,
rounds alternated (graph replays: device time), every pair checked bit-identical first. Sets: ``n16d4`` (the issue's N=2^16
dnum-4 rotation), ``n16`` (dnum 9), ``n14`` (one-prime digits), NTT in and out, and ``n16d4``
coefficient in and out.

Needs change 50's code (``change50_one_pass_rotation.patch``: ``rotate_keyswitch(..., c_domain=)``
and the fused kernel's own rows); it was measured slower and not kept.

Usage, from the repository root:
    python3 bench/results/2026-11-30-s21/rotation16.py [--sets n16d4,n16,n14] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench._example18 import alternate  # noqa: E402
from bench._timing import device_median_us  # noqa: E402
from bench.kernels_gpu import capture_private, make_sets, random_rows  # noqa: E402


def pair(cp, be, ctx, domain: str) -> dict:
    """(one-pass, hoisted) callables of one rotation by g = 5 with ``c`` and the output in ``domain``."""
    L, K = ctx.q_count, ctx.p_count
    rows, qp = tuple(range(L)), tuple(range(L + K))
    rng = np.random.default_rng(3)
    ct = random_rows(be, ctx, rng, (2,), rows)  # uniform residues: as good NTT values as coefficients
    key = random_rows(be, ctx, rng, (len(ctx.digits), 2), qp)
    g = 5

    def one_pass():
        return be.rotate_keyswitch(ct[1], key, rows, g, c0=ct[0], domain=domain, c_domain=domain)

    def hoisted():
        if domain == "ntt":
            digits = be.modup(be.ntt_inverse(ct[1], rows), rows, c_ntt=ct[1])
        else:
            digits = be.modup(ct[1], rows)
        return be.keyswitch_from_digits_many(digits, [key], rows, [g], c0=ct[0], domain=domain)

    return {"one-pass": one_pass, "hoisted": hoisted}


def measure(cp, be, ctx, label: str, domain: str, rounds: int) -> dict:
    """Check the pair bit-identical, count its launches, capture each (private pools) and time
    the graphs alternated, then the eager calls."""
    fns = pair(cp, be, ctx, domain)
    got = {k: cp.asnumpy(fn()) for k, fn in fns.items()}
    if got["one-pass"] is None or not np.array_equal(got["one-pass"], got["hoisted"]):
        raise SystemExit(f"{label} {domain}: the one-pass rotation differs from the hoisted form")
    launches = {}
    for key, fn in fns.items():
        before = be.launch_count
        fn()
        launches[key] = be.launch_count - before
    stream = cp.cuda.Stream(non_blocking=True)
    print(f"== {label}, {domain} in and out; launches {launches}; bit-identical", flush=True)
    captured = {key: capture_private(cp, fn, stream) for key, fn in fns.items()}  # (graph, its pool)
    graphs = {key: graph for key, (graph, _) in captured.items()}
    with stream:
        print("graph device us", flush=True)
        values = alternate(list(fns), rounds,
                           lambda key: device_median_us(graphs[key].launch, runs=30, warmup=3, stream=stream))
        print("eager us (events around the eager call: host-bound where the host is slower)", flush=True)
        eager = alternate(list(fns), 2, lambda key: device_median_us(fns[key], runs=20, warmup=3, stream=stream))
    return {"label": label, "launches": launches, "graph_us": values, "eager_us": eager}


def main() -> None:
    import cupy as cp

    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sets", default="n16d4,n16,n14")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    sets = make_sets()
    report = {}
    for name, domain in [(name, "ntt") for name in args.sets.split(",")] + [("n16d4", "coefficient")]:
        label, ctx = sets[name]
        report[f"{name} {domain}"] = measure(cp, CupyBackend(ctx), ctx, label, domain, args.rounds)
        cp.get_default_memory_pool().free_all_blocks()
    Path(args.out, "rotation16.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
