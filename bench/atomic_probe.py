"""Probe: can a ModUp's chunk kernel add its key products into the output with global atomics?

The N=2^16 dnum-4 rotation writes its digits' NTT values (4 digits x 40 rows, 84 MB) and the key
inner product reads them back (perf notes change 66, lever 1). The alternative: each digit's
chunk kernel multiplies its values by the key and adds them into the two output rows with
``red.global.add.u64`` (lazy sums of 4 canonical products stay below 2^64 for q < 2^62), so
the digits never reach memory. What decides it is the atomics' throughput. This probe times,
with CUDA events (median of ``--reps``), the traffic patterns alone (values from a small
L2-resident row, no arithmetic):

* ``digit_store``: what the chunk kernel writes now, D x R rows of N words;
* ``atomic_add``: 2 x D x R x N atomic adds into the [2, R, N] accumulator, coalesced (each
  warp's 32 consecutive words), the digits of a row hitting the same words;
* ``atomic_add_permuted``: the same with the positions bit-reversed inside each chunk of 4096
  (a Galois permutation done at the atomic instead of through shared memory);
* ``accumulator_zero``: ``cudaMemsetAsync`` of the accumulator (the zeros the atomics need).

Every variant's result is checked: the stores against the source, the sums against D times the
source (mod 2^64). Usage (on a GPU):
    PYTHONPATH=$PWD python3 bench/atomic_probe.py OUT_DIR [--digits 4] [--rows 40] [--log-n 16]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import exit_without_gpu, positive_int  # noqa: E402

_SOURCE = r"""
typedef unsigned long long u64;

// dst[(d * rows + r) * n + k] = src[k]: the digits' NTT values as the chunk kernel stores them.
// Grid (n / 256, rows, digits), block 256.
extern "C" __global__ void probe_digit_store(const u64* src, u64* dst, int n, int rows) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  dst[((long long)blockIdx.z * rows + blockIdx.y) * n + k] = src[k];
}

// acc[c, r, j(k)] += src[k] for c = 0, 1 and every digit (blockIdx.z): j(k) = k, or with
// `permuted` k's low 12 bits reversed (a permutation inside each chunk of 4096).
extern "C" __global__ void probe_atomic_add(const u64* src, u64* acc, int n, int rows, int permuted) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = permuted ? ((k & ~4095) | (int)(__brev((unsigned)(k & 4095)) >> 20)) : k;
  const u64 v = src[k];
  atomicAdd(acc + (long long)blockIdx.y * n + j, v);
  atomicAdd(acc + ((long long)rows + blockIdx.y) * n + j, v);
}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="writes atomic_probe.json here")
    parser.add_argument("--digits", type=int, default=4)
    parser.add_argument("--rows", type=int, default=40, help="output rows (Q + P primes)")
    parser.add_argument("--log-n", type=int, default=16)
    parser.add_argument("--reps", type=positive_int, default=50)
    args = parser.parse_args(argv)
    if not 12 <= args.log_n <= 17 or args.digits < 1 or args.rows < 1:
        parser.error("--log-n must be in [12, 17], --digits and --rows at least 1")
    exit_without_gpu("bench/atomic_probe.py")

    import cupy

    from bench._timing import time_device_cupy

    n, rows, digits = 1 << args.log_n, args.rows, args.digits
    module = cupy.RawModule(code=_SOURCE, options=("-std=c++17",))
    store = module.get_function("probe_digit_store")
    add = module.get_function("probe_atomic_add")
    src = cupy.asarray(np.random.default_rng(0).integers(0, 1 << 62, n, dtype=np.uint64))
    digits_out = cupy.empty((digits, rows, n), dtype=cupy.uint64)
    acc = cupy.empty((2, rows, n), dtype=cupy.uint64)
    grid = (n // 256, rows, digits)
    stream = cupy.cuda.get_current_stream()

    def run_store() -> None:
        store(grid, (256,), (src, digits_out, np.int32(n), np.int32(rows)))

    def run_add(permuted: int) -> None:
        add(grid, (256,), (src, acc, np.int32(n), np.int32(rows), np.int32(permuted)))

    def zero() -> None:
        acc.fill(0)

    results: dict[str, object] = {"n": n, "rows": rows, "digits": digits, "reps": args.reps,
                                  "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    checks: dict[str, bool] = {}
    run_store()
    checks["digit_store"] = bool((digits_out == src).all())
    want = (src.get().astype(object) * digits % (1 << 64)).astype(np.uint64)
    for name, permuted in (("atomic_add", 0), ("atomic_add_permuted", 1)):
        zero()
        run_add(permuted)
        got = acc.get()
        if permuted:
            k = np.arange(n)
            j = (k & ~4095) | np.array([int(f"{x:012b}"[::-1], 2) for x in range(4096)])[k & 4095]
            got = got[:, :, j]
        checks[name] = bool((got == want).all())
    timings = {
        "digit_store": time_device_cupy(run_store, runs=args.reps, warmup=5, stream=stream),
        "atomic_add": time_device_cupy(lambda: run_add(0), runs=args.reps, warmup=5, stream=stream),
        "atomic_add_permuted": time_device_cupy(lambda: run_add(1), runs=args.reps, warmup=5, stream=stream),
        "accumulator_zero": time_device_cupy(zero, runs=args.reps, warmup=5, stream=stream),
    }
    mb = {"digit_store": digits_out.nbytes, "atomic_add": 2 * digits * rows * n * 8,
          "atomic_add_permuted": 2 * digits * rows * n * 8, "accumulator_zero": acc.nbytes}
    for name, stats in timings.items():
        us = stats["median_ms"] * 1e3
        results[name] = {"median_us": us, "bytes": mb[name], "gb_per_s": mb[name] / us / 1e3, "exact": checks.get(name)}
        print(f"{name:<22} {us:9.1f} us  {mb[name] / 1e6:7.1f} MB  {mb[name] / us / 1e3:7.0f} GB/s"
              + ("" if checks.get(name, True) else "  WRONG"))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "atomic_probe.json").write_text(json.dumps(results, indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
