"""Latency of the client-side operations: encode, encrypt, decrypt, decode (host wall clock).

These run partly on the host (sampling from the OS CSPRNG, encoding FFTs, the CRT of a
decryption), so they are timed end to end with the device drained (``bench._timing.time_host``,
medians after warmup), per preset and device, with a cProfile of the slowest calls.

Usage: PYTHONPATH=$PWD python3 bench/client_ops.py [--device cuda] [--presets P1,P2] [--runs 15]
       [--out DIR]   (writes client_ops.json and the profiles' text)
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import exit_without_gpu, non_negative_int, positive_int  # noqa: E402
from bench._timing import cuda_sync, time_host  # noqa: E402
from fhelium_cupy.ckks import CkksEngine  # noqa: E402


def _profile(fn, repeats: int) -> str:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(repeats):
        fn()
    cuda_sync()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(18)
    return text.getvalue()


def measure(preset: str, device: str, runs: int, warmup: int, profiles: dict[str, str]) -> dict[str, dict]:
    engine = CkksEngine(preset, device=device, insecure=preset.startswith("test-"))
    engine.generate_keys()
    m = np.random.default_rng(0).uniform(-1, 1, engine.num_slots)  # test data only
    ct = engine.encrypt_message(m)
    pt_coeff = engine.encode(m, polynomial_domain="coefficient")
    decrypted = engine.decrypt(ct)
    sync = cuda_sync if device == "cuda" else None
    calls = {
        "encode (coefficient)": lambda: engine.encode(m, polynomial_domain="coefficient"),
        "encode (ntt, for multiply_plaintext)": lambda: engine.encode(m),
        "encrypt (plaintext given)": lambda: engine.encrypt(pt_coeff),
        "encrypt_message": lambda: engine.encrypt_message(m),
        "decrypt": lambda: engine.decrypt(ct),
        "decode": lambda: engine.decode(decrypted),
        "decrypt_message": lambda: engine.decrypt_message(ct),
    }
    out = {}
    for name, fn in calls.items():
        out[name] = time_host(fn, runs=runs, warmup=warmup, synchronize=sync)
        print(f"{preset:34s} {device:4s} {name:38s} {out[name]['median_ms']:9.3f} ms", flush=True)
    for name in ("encrypt_message", "decrypt_message"):
        profiles[f"{preset} {device} {name}"] = _profile(calls[name], 5)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--presets", default="slots8192-scale40-depth7,slots32768-scale40-depth33-dnum4")
    parser.add_argument("--runs", type=positive_int, default=15)
    parser.add_argument("--warmup", type=non_negative_int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.device == "cuda":
        exit_without_gpu("bench/client_ops.py")
    profiles: dict[str, str] = {}
    results = {p: measure(p, args.device, args.runs, args.warmup, profiles) for p in args.presets.split(",")}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "client_ops.json").write_text(json.dumps({"device": args.device, "results": results}, indent=1))
        (args.out / "client_ops_profiles.txt").write_text("\n\n".join(f"== {k}\n{v}" for k, v in profiles.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
