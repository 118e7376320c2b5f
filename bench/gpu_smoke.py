"""One PASS/FAIL line per CupyBackend primitive against the NumPy reference (run on a GPU).

Usage: PYTHONPATH=$PWD python3 bench/gpu_smoke.py [--contexts n4096,n16384,n65536]
Exit status 1 if anything failed. Every line: STATUS context primitive seconds detail.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--contexts", default="n4096,n16384,n65536")
    args = parser.parse_args()
    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend
    from fhelium_cupy.runtime.kernels import KernelLibrary
    from tests.kernels import gpu_cases

    t = time.perf_counter()
    try:
        KernelLibrary.for_device().compile_all()
        print(f"PASS compile all kernels {time.perf_counter() - t:.1f}s", flush=True)
    except Exception as error:  # noqa: BLE001 - report and stop
        print(f"FAIL compile: {error}", flush=True)
        return 1
    failures = 0
    for ctx_name in args.contexts.split(","):
        ctx = gpu_cases.context(ctx_name)
        gpu, ref = CupyBackend(ctx), gpu_cases.reference(ctx)
        checks = [(name, gpu_cases.run_case, (name, gpu, ref, ctx_name)) for name in gpu_cases.CASES]
        checks.append(("capture_ntt_forward", gpu_cases.run_capture_ntt, (gpu, ctx_name)))
        if ctx_name != "n65536":
            checks.append(("capture_rotation", gpu_cases.run_capture_rotation, (gpu, ctx_name)))
        for name, check, check_args in checks:
            t = time.perf_counter()
            try:
                error = check(*check_args)
            except Exception as exc:  # noqa: BLE001 - one line per failure, keep going
                error = f"{type(exc).__name__}: {exc} | {traceback.format_exc().splitlines()[-3].strip()}"
            status = "PASS" if error is None else "FAIL"
            failures += error is not None
            print(f"{status} {ctx_name} {name} {time.perf_counter() - t:.2f}s {error or ''}", flush=True)
    print(f"SUMMARY {'ALL PASS' if failures == 0 else f'{failures} FAILED'}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
