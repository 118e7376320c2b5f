"""Per-kernel device time of one engine operation, measured with Nsight Compute (ncu).

Two steps (run on a GPU; ncu serializes kernels, so only per-kernel durations are meaningful,
not the end-to-end time):

    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \\
        --log-file "$OUT/ncu_matvec14.csv" python3 bench/profile_kernels.py matvec14
    python3 bench/profile_kernels.py --summarize "$OUT/ncu_matvec14.csv" > "$OUT/profile.md"

Workloads (the profiled range is exactly one call, after warmup):
* ``matvec14``: hoisted 8-diagonal ``matrix_vector`` at ``slots8192-scale40-depth7``.
* ``matvec14_independent``: the same with ``hoisted=False`` (FHElium example 18's schedule:
  seven ``rotate_with_key`` calls on the coefficient-domain source).
* ``rotation14``: one of those rotations (coefficient-domain input, NTT output).
* ``rotation16``: ``rotate_with_key`` of an NTT-domain ciphertext, NTT output, at
  ``slots32768-scale40-depth33-dnum4`` (N=2^16, 34 Q + 6 P).
* ``ntt16``: forward then inverse NTT of one ciphertext at the same preset (68 limb transforms
  each way); pair it with ncu ``--section`` sets for pipe use, stalls and occupancy.
``--clock-control none`` keeps the GPU's own (boost) clocks, as in the CUDA-event benchmarks.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from functools import partial
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import exit_without_gpu  # noqa: E402


def _profiler(cp, start: bool) -> None:
    """cudaProfilerStart/Stop (the range ncu --profile-from-start off records)."""
    runtime = cp.cuda.runtime
    name = "profilerStart" if start else "profilerStop"
    if hasattr(runtime, name):
        getattr(runtime, name)()
    else:  # older CuPy
        (cp.cuda.profiler.start if start else cp.cuda.profiler.stop)()


def _matvec14(hoisted: bool = True):
    from fhelium_cupy.ckks import CkksEngine, encode_diagonals, matrix_vector, periodic_message, required_rotation_steps

    engine = CkksEngine("slots8192-scale40-depth7", device="cuda")
    engine.generate_keys()
    rng = np.random.default_rng(0)
    a, x = rng.uniform(-1, 1, (8, 8)), rng.uniform(-1, 1, 8)
    keys = engine.rotation_keys(required_rotation_steps(8))
    ct = engine.encrypt_message(periodic_message(x, engine.num_slots))
    return partial(matrix_vector, ct, engine=engine, diagonals=encode_diagonals(engine, a), rotation_keys=keys,
                   hoisted=hoisted)


def _rotation14():
    from fhelium_cupy.ckks import CkksEngine

    engine = CkksEngine("slots8192-scale40-depth7", device="cuda")
    engine.generate_keys()
    key = engine.rotation_key(1)
    ct = engine.encrypt_message(np.random.default_rng(1).uniform(-1, 1, engine.num_slots))
    return partial(engine.rotate_with_key, ct, key, output_domain="ntt")


def _rotation16():
    from fhelium_cupy.ckks import CkksEngine

    engine = CkksEngine("slots32768-scale40-depth33-dnum4", device="cuda")
    engine.generate_keys()
    key = engine.rotation_key(1)
    m = np.random.default_rng(1).uniform(-1, 1, engine.num_slots)
    ct = engine.coefficient_domain_to_ntt_domain(engine.encrypt_message(m))
    return partial(engine.rotate_with_key, ct, key, output_domain="ntt")


def _ntt16():
    from fhelium_cupy.ckks import CkksEngine

    engine = CkksEngine("slots32768-scale40-depth33-dnum4", device="cuda")
    engine.generate_keys()
    m = np.random.default_rng(2).uniform(-1, 1, engine.num_slots)
    ct = engine.encrypt_message(m)

    def forward_and_inverse():
        return engine.ntt_domain_to_coefficient_domain(engine.coefficient_domain_to_ntt_domain(ct))

    return forward_and_inverse


WORKLOADS = {"matvec14": _matvec14, "matvec14_independent": partial(_matvec14, hoisted=False),
             "rotation14": _rotation14, "rotation16": _rotation16, "ntt16": _ntt16}


def run(name: str) -> None:
    import cupy as cp

    fn = WORKLOADS[name]()
    for _ in range(3):
        fn()
    cp.cuda.Device().synchronize()
    _profiler(cp, True)
    fn()
    cp.cuda.Device().synchronize()
    _profiler(cp, False)


def summarize(path: Path) -> str:
    """Markdown table: kernel, launches, total and mean µs, share of the sum (ncu --csv log)."""
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return f"no ncu table in {path}\n"
    totals: dict[str, list[float]] = defaultdict(list)
    order: list[str] = []
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0]
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        scales = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
        if unit not in scales:
            raise ValueError(f"{path}: unknown time unit {unit!r} in the ncu log")
        scale = scales[unit]
        if name not in totals:
            order.append(name)
        totals[name].append(value * scale)
    grand = sum(sum(v) for v in totals.values())
    out = [f"## {path.stem}: {sum(len(v) for v in totals.values())} kernels, {grand:.1f} µs summed", "",
           "| kernel (first-launch order) | launches | total µs | mean µs | share |", "| --- | --- | --- | --- | --- |"]
    for name in order:
        v = totals[name]
        out.append(f"| {name} | {len(v)} | {sum(v):.1f} | {sum(v) / len(v):.1f} | {100 * sum(v) / grand:.0f}% |")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", nargs="?", choices=sorted(WORKLOADS))
    parser.add_argument("--summarize", nargs="+", type=Path, help="ncu --csv logs to tabulate instead")
    args = parser.parse_args()
    if args.summarize:
        missing = [str(p) for p in args.summarize if not p.is_file()]
        if missing:
            parser.error(f"--summarize: no such file: {', '.join(missing)}")
        print("\n".join(summarize(p) for p in args.summarize))
        return 0
    exit_without_gpu("bench/profile_kernels.py")
    if args.workload is None:
        parser.error("name a workload or give --summarize")
    run(args.workload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
