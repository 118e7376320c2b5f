"""Host cost of one cudaMemcpyAsync through CuPy, by copy kind (the input copy of a replay).

Question: does naming the direction (cudaMemcpyDeviceToDevice / HostToDevice) instead of
cudaMemcpyDefault (direction looked up through unified addressing) make the per-replay input
copy cheaper on the host? Median host µs per call over ``--runs`` calls, no synchronize in the
timed region; the queue is drained (untimed) every 64 calls.

Run on a GPU: ``PYTHONPATH=$PWD python3 bench/memcpy_host.py [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import exit_without_gpu, positive_int  # noqa: E402
from bench._timing import time_host_pipelined  # noqa: E402

KINDS = {"default": 4, "device_to_device": 3, "host_to_device": 1}


def host_us(fn, stream, runs: int) -> float:
    """Median host µs per call, pipelined (``bench._timing.time_host_pipelined``)."""
    return time_host_pipelined(fn, runs=runs, warmup=64, drain=stream.synchronize)["median_us"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nbytes", type=int, default=2 * 8 * 16384 * 8)
    parser.add_argument("--runs", type=positive_int, default=3000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    exit_without_gpu("bench/memcpy_host.py")
    import cupy as cp

    runtime = cp.cuda.runtime
    stream = cp.cuda.Stream(non_blocking=True)
    dst = cp.empty(args.nbytes, dtype=cp.uint8)
    src = cp.empty(args.nbytes, dtype=cp.uint8)
    pinned = cp.cuda.alloc_pinned_memory(args.nbytes)
    results = {}
    cases = {
        "d2d kind=default": (src.data.ptr, KINDS["default"]),
        "d2d kind=device_to_device": (src.data.ptr, KINDS["device_to_device"]),
        "pinned h2d kind=default": (pinned.ptr, KINDS["default"]),
        "pinned h2d kind=host_to_device": (pinned.ptr, KINDS["host_to_device"]),
    }
    for _ in range(2):  # second round is the one reported (first warms everything up)
        for name, (ptr, kind) in cases.items():
            results[name] = round(host_us(lambda p=ptr, k=kind: runtime.memcpyAsync(
                dst.data.ptr, p, args.nbytes, k, stream.ptr), stream, args.runs), 3)
    event = cp.cuda.Event(False)
    results["eventRecord"] = round(host_us(lambda: event.record(stream), stream, args.runs), 3)
    for name, value in results.items():
        print(f"{name:<34} {value:8.3f} us")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"nbytes": args.nbytes, "runs": args.runs, "host_us": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
