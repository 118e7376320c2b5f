"""Per-operation eager latency at one preset, each against its memory-bandwidth floor.

Operations on a fresh ciphertext (top level, every Q limb): forward NTT of a ciphertext,
rescale, multiply + relinearize, rotate, and the n-diagonal matvec. The floor is the
traffic model of reference/gpu-ckks-performance-anchors.md §4: bytes a perfectly fused
kernel must read and write (intermediates on chip), divided by the H200's measured
device-to-device bandwidth (4.3e12 B/s read+write, measured on the H200):

* NTT(ct), one pass: read + write 2·l limbs
* rescale: read 2·l limbs, write 2·(l-1)
* rotate (HRot): read ct + read evk + write ct
* multiply + relinearize (HMult): read 2 ct + read evk + write ct
* matvec (n diagonals): read ct + (n-1) evk + n plaintext diagonals (l limbs each) + write ct at l-1

with l = active Q limbs, K = special primes, d = digits touching the active limbs,
evk = 2·d·(l+K) limbs, a limb = N words of 8 bytes.

Engine methods are looked up by name (the engine's spelling wins); an operation the
engine lacks is recorded as skipped with the reason.
Run: ``python bench/ops.py --device cpu --preset test-n4096-scale40 --insecure``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import emit_json, exit_without_gpu, non_negative_int, positive_int
from bench._timing import time_device_cupy, time_host
from fhelium_cupy._demo import MatvecWorkload, launch_counter

__all__ = ["H200_BANDWIDTH", "WORD_BYTES", "bench_ops", "floor_bytes", "main", "parameter_summary"]

H200_BANDWIDTH = 4.3e12  # B/s, measured D2D copy (read + write) on the H200
WORD_BYTES = 8


def parameter_summary(preset: str) -> dict[str, Any]:
    """Ring degree, limb counts, digits and log2(QP) of a preset (no security check: descriptive)."""
    from fhelium_cupy.ckks.params import Parameters

    params = Parameters.preset(preset, insecure=True)
    return {
        "preset": preset,
        "ring_degree": params.ring_degree,
        "slots": params.num_slots,
        "q_count": len(params.q_moduli),
        "p_count": len(params.p_moduli),
        "dnum": params.dnum,
        "digits": [list(d) for d in params.digits],
        "log2_qp": round(params.log2_qp, 1),
        "scale_log2": round(__import__("math").log2(params.scale), 2),
        "insecure": bool(params.insecure),
    }


def floor_bytes(summary: dict[str, Any], op: str, *, limbs: int | None = None, size: int | None = None) -> int:
    """Minimal DRAM traffic in bytes of ``op`` at ``limbs`` active Q limbs (default: all)."""
    n = summary["ring_degree"]
    limb = n * WORD_BYTES
    q, k = summary["q_count"], summary["p_count"]
    ell = q if limbs is None else limbs
    # active Q ids are the last ``ell`` ids (the first prime is dropped first)
    active = set(range(q - ell, q))
    d = sum(1 for digit in summary["digits"] if active.intersection(digit))
    ct = 2 * ell * limb
    evk = 2 * d * (ell + k) * limb
    if op == "ntt_ct":
        return 2 * ct
    if op == "rescale":
        return ct + 2 * (ell - 1) * limb
    if op == "rotate":
        return ct + evk + ct
    if op == "multiply_relinearize":
        return 2 * ct + evk + ct
    if op == "multiply_relinearize_rescale":
        return 2 * ct + evk + 2 * (ell - 1) * limb
    if op == "matvec":
        if size is None:
            raise ValueError("matvec floor needs the matrix size")
        return ct + (size - 1) * evk + size * ell * limb + 2 * (ell - 1) * limb
    raise ValueError(f"unknown operation {op!r}")


def _method(engine: Any, *names: str) -> Callable[..., Any] | None:
    for name in names:
        fn = getattr(engine, name, None)
        if callable(fn):
            return fn
    return None


def _operations(workload: MatvecWorkload, ct: Any) -> dict[str, Callable[[], Any] | str]:
    """name -> zero-argument callable on a fresh ciphertext (or the reason it is unavailable)."""
    engine = workload.engine
    ops: dict[str, Callable[[], Any] | str] = {}
    to_ntt = _method(engine, "coefficient_domain_to_ntt_domain")
    rescale = _method(engine, "rescale_to_next_level", "rescale_to_next_depth")
    multiply, relinearize = _method(engine, "multiply"), _method(engine, "relinearize")
    rotate = _method(engine, "rotate_with_key")
    ops["ntt_ct"] = (lambda: to_ntt(ct)) if to_ntt else "engine has no coefficient_domain_to_ntt_domain"
    ops["rescale"] = (lambda: rescale(ct)) if rescale else "engine has no rescale_to_next_level"
    if to_ntt and multiply and relinearize:
        ct_ntt = to_ntt(ct)
        rlk = engine.relinearization_key()
        # NTT in, NTT out: the HMult floor (read 2 ct + evk, write ct) has no domain change
        ops["multiply_relinearize"] = lambda: relinearize(multiply(ct_ntt, ct_ntt), rlk, output_domain="ntt")
        # the rescale folded into the relinearization's ModDown (one division by P q_0)
        ops["multiply_relinearize_rescale"] = lambda: relinearize(
            multiply(ct_ntt, ct_ntt), rlk, output_domain="ntt", rescale=True)
    else:
        ops["multiply_relinearize"] = ops["multiply_relinearize_rescale"] = "engine lacks multiply / relinearize"
    keys = workload.rotation_keys
    key = keys.get(1) if isinstance(keys, dict) else None
    if rotate and key is not None:
        ops["rotate"] = lambda: rotate(ct, key)
    else:
        ops["rotate"] = "engine has no rotate_with_key (or the workload no step-1 key: size 1)"
    ops["matvec"] = lambda: workload.schedule(ct)
    return ops


def bench_ops(workload: MatvecWorkload, *, runs: int, warmup: int, bandwidth: float = H200_BANDWIDTH) -> list[dict[str, Any]]:
    """One row per operation: latency stats, device time, launches, floor bytes and ratio."""
    summary = parameter_summary(workload.preset)
    _, ct = workload.new_input()
    counter = launch_counter(workload.engine)
    sync = workload.synchronize
    rows = []
    for name, fn in _operations(workload, ct).items():
        floor = floor_bytes(summary, name, size=workload.size if name == "matvec" else None)
        row: dict[str, Any] = {
            "op": name, "limbs": summary["q_count"], "size": workload.size if name == "matvec" else None,
            "floor_bytes": floor, "floor_ms": floor / bandwidth * 1e3, "bandwidth_bytes_per_s": bandwidth,
        }
        if isinstance(fn, str):
            row["skipped"] = fn
            rows.append(row)
            continue
        try:
            before = counter()
            fn()
            sync()
            after = counter()
            row["launches"] = None if before is None else after - before
            row["latency"] = time_host(fn, runs=runs, warmup=warmup, synchronize=sync)
            row["device"] = time_device_cupy(fn, runs=runs, warmup=warmup) if workload.device == "cuda" else None
            best = (row["device"] or row["latency"])["median_ms"]
            row["x_floor"] = best / row["floor_ms"] if best else None
        except Exception as error:
            row["skipped"] = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--preset", default="slots8192-scale40-depth7")
    parser.add_argument("--size", type=positive_int, default=8, help="matvec size")
    parser.add_argument("--runs", type=positive_int, default=20)
    parser.add_argument("--warmup", type=non_negative_int, default=3)
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.device == "cuda":
        exit_without_gpu("bench/ops.py")
    workload = MatvecWorkload.build(preset=args.preset, device=args.device, size=args.size, insecure=args.insecure)
    rows = bench_ops(workload, runs=args.runs, warmup=args.warmup)
    emit_json({"parameters": parameter_summary(args.preset), "ops": rows}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
