"""CPU benchmark of the exact NumPy CKKS engine: 8x8 encrypted matrix-vector products.

Runs on one core (OMP/OPENBLAS/MKL threads = 1, set before NumPy is imported) at the
insecure N=2^12 test presets, times encrypt + evaluate + decrypt of an 8x8 product (the
median of several runs after one warm-up) for the cyclic-diagonal method (FHElium
example 18 schedule, single-hoisted with Q diagonals, double-hoisted with QP diagonals) and
for BSGS, checks the maximum absolute error against NumPy, and writes ckks_cpu.{md,json}
into ``--out`` (bench/results/ holds the committed record).

Usage: python bench/ckks_cpu.py [--out DIR] [--runs 7] [--size 8]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import positive_int  # noqa: E402
from fhelium_cupy.ckks import (  # noqa: E402
    CkksEngine,
    encode_bsgs_diagonals,
    encode_diagonals,
    matrix_vector,
    matrix_vector_bsgs,
    periodic_message,
    required_rotation_steps,
    required_rotation_steps_bsgs,
)

__all__ = ["main"]

TARGETS = {"test-n4096-scale30": 1e-4, "test-n4096-scale40": 1e-6}
TIME_TARGET_S = 0.1


def _pin_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        except OSError:
            pass


def _case(engine: CkksEngine, n: int, method: str, runs: int) -> dict:
    rng = np.random.default_rng(0)  # benchmark data only
    a, x = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, n)
    if method == "bsgs":
        keys = engine.rotation_keys(required_rotation_steps_bsgs(n))
        diagonals = encode_bsgs_diagonals(engine, a)
    else:  # QP diagonals (the default) make the hoisted schedule double-hoisted
        keys = engine.rotation_keys(required_rotation_steps(n))
        diagonals = encode_diagonals(engine, a, modulus_basis="QP" if method == "cyclic-double-hoisted" else "Q")
    message = periodic_message(x, engine.num_slots)
    want = periodic_message(a @ x, engine.num_slots)

    def once() -> tuple[float, float, float, float]:
        t0 = time.perf_counter()
        ct = engine.encrypt_message(message)
        t1 = time.perf_counter()
        if method == "bsgs":
            y = matrix_vector_bsgs(ct, engine=engine, diagonals=diagonals, rotation_keys=keys)
        else:
            y = matrix_vector(
                ct, engine=engine, diagonals=diagonals, rotation_keys=keys, hoisted=method.endswith("hoisted")
            )
        t2 = time.perf_counter()
        got = engine.decrypt_message(y, real=True)
        t3 = time.perf_counter()
        return t3 - t0, t1 - t0, t2 - t1, float(np.max(np.abs(got - want))), t3 - t2

    once()  # warm-up: tables, caches
    samples = [once() for _ in range(runs)]
    total = statistics.median(s[0] for s in samples)
    return {
        "method": method,
        "size": n,
        "runs": runs,
        "median_total_s": total,
        "median_encrypt_s": statistics.median(s[1] for s in samples),
        "median_evaluate_s": statistics.median(s[2] for s in samples),
        "median_decrypt_s": statistics.median(s[4] for s in samples),
        "max_abs_error": max(s[3] for s in samples),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=positive_int, default=7)
    parser.add_argument("--size", type=positive_int, default=8)
    parser.add_argument("--out", type=Path, default=Path("ckks_cpu_out"),
                        help="output directory (default ./ckks_cpu_out; bench/results holds the committed record)")
    args = parser.parse_args(argv)
    _pin_one_core()
    rows = []
    for preset, tolerance in TARGETS.items():
        engine = CkksEngine(preset, insecure=True)
        engine.generate_keys()
        for method in ("cyclic", "cyclic-hoisted", "cyclic-double-hoisted", "bsgs"):
            row = _case(engine, args.size, method, args.runs)
            row.update(preset=preset, error_target=tolerance, error_ok=row["max_abs_error"] < tolerance)
            row["time_ok"] = row["median_total_s"] < TIME_TARGET_S
            rows.append(row)
            print(
                f"{preset:20s} {method:21s} total {row['median_total_s'] * 1e3:7.1f} ms "
                f"(enc {row['median_encrypt_s'] * 1e3:5.1f} / eval {row['median_evaluate_s'] * 1e3:6.1f} / "
                f"dec {row['median_decrypt_s'] * 1e3:5.1f}) error {row['max_abs_error']:.2e}"
            )
    info = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": platform.machine(),
        "processor": platform.processor() or "unknown",
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "threads": "1 (OMP/OPENBLAS/MKL/NUMEXPR=1, pinned to one core)",
        "time_target_s": TIME_TARGET_S,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ckks_cpu.json").write_text(json.dumps({"info": info, "results": rows}, indent=2) + "\n")
    lines = [
        "# CKKS CPU benchmark (exact NumPy backend)",
        "",
        f"{args.size}x{args.size} encrypted matrix-vector product, encrypt + evaluate + decrypt, median of "
        f"{args.runs} runs after one warm-up, N = 2^12 insecure test presets, one core.",
        "",
        "| preset | method | total ms | encrypt ms | evaluate ms | decrypt ms | max abs error | error target | < 0.1 s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['preset']} | {r['method']} | {r['median_total_s'] * 1e3:.1f} | {r['median_encrypt_s'] * 1e3:.1f} | "
            f"{r['median_evaluate_s'] * 1e3:.1f} | {r['median_decrypt_s'] * 1e3:.1f} | {r['max_abs_error']:.2e} | "
            f"{r['error_target']:.0e} | {'yes' if r['time_ok'] else 'no'} |"
        )
    lines += ["", "Machine:", ""] + [f"- {k}: {v}" for k, v in info.items()] + [""]
    (args.out / "ckks_cpu.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
