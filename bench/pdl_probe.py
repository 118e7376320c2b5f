"""Probe: what programmatic dependent launch (PDL) saves between dependent kernels of a graph.

A chain of ``--chain`` launches of one small kernel (each reads the previous launch's output),
captured into a CUDA graph three ways and replayed side by side (CUDA-event medians):

* ``plain``: CuPy ``RawKernel`` launches (what the CuPy backend captures today);
* ``pdl_wait``: ``cuLaunchKernelEx`` (cuda.bindings) with the programmatic stream serialization
  attribute; the kernel waits for its predecessor (``griddepcontrol.wait``) before any global
  access and triggers its dependents implicitly when its blocks exit;
* ``pdl_trigger``: the same, and each block triggers its dependents first
  (``griddepcontrol.launch_dependents``), so the next grid's blocks can be placed while this
  grid's last blocks still run.

Every variant's final output is compared with the plain chain's. Usage (on a GPU; needs the
``cuda-bindings`` package, which no extra of this project installs: ``pip install cuda-bindings``):
    PYTHONPATH=$PWD python3 bench/pdl_probe.py OUT_DIR [--chain 15] [--reps 50]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import emit_json, exit_without_gpu, positive_int  # noqa: E402
from bench._timing import device_median_us  # noqa: E402

SOURCE = r"""
extern "C" __global__ void chain_step(const unsigned long long* in, unsigned long long* out, int n, int iters,
                                      int mode) {
  if (mode >= 1) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (mode == 2) asm volatile("griddepcontrol.launch_dependents;");
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long x = in[i];
  for (int k = 0; k < iters; ++k) x = x * 6364136223846793005ull + 1442695040888963407ull;
  out[i] = x;
}
"""


def pdl_launcher(cp):
    """A function launching a RawKernel with the PDL attribute through cuda.bindings
    (``RawKernel.kernel.ptr`` is its CUfunction)."""
    from cuda.bindings import driver

    def launch(func, grid, block, args, stream_ptr):
        config = driver.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
        config.sharedMemBytes = 0
        config.hStream = driver.CUstream(stream_ptr)
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        config.attrs = [attr]
        config.numAttrs = 1
        values = [ctypes.c_uint64(a.data.ptr) if isinstance(a, cp.ndarray) else ctypes.c_int32(int(a)) for a in args]
        params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        (err,) = driver.cuLaunchKernelEx(config, driver.CUfunction(func.kernel.ptr), ctypes.addressof(params), 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuLaunchKernelEx: {err}")

    return launch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", nargs="?", default=os.environ.get("OUT", "bench_out"))
    parser.add_argument("--chain", type=int, default=15)
    parser.add_argument("--reps", type=positive_int, default=50)
    args = parser.parse_args()
    exit_without_gpu("bench/pdl_probe.py")
    import cupy as cp

    module = cp.RawModule(code=SOURCE, options=("--std=c++17",))
    func = module.get_function("chain_step")
    launch_pdl = pdl_launcher(cp)
    rows = []
    stream = cp.cuda.Stream(non_blocking=True)
    for n, iters, block in ((1 << 14, 40, 128), (1 << 17, 40, 256), (1 << 17, 400, 256), (1 << 20, 100, 256)):
        a = cp.arange(n, dtype=cp.uint64)
        b = cp.empty_like(a)
        grid = (-(-n // block), 1, 1)
        results = {}
        for name, mode in (("plain", 0), ("pdl_wait", 1), ("pdl_trigger", 2)):
            a[...] = cp.arange(n, dtype=cp.uint64)
            cp.cuda.Device().synchronize()  # the reset ran on the default stream
            with stream:
                stream.begin_capture()
                for k in range(args.chain):
                    src, dst = (a, b) if k % 2 == 0 else (b, a)
                    kargs = (src, dst, np.int32(n), np.int32(iters), np.int32(mode))
                    if mode == 0:
                        func(grid, (block, 1, 1), kargs)
                    else:
                        launch_pdl(func, grid, block, kargs, stream.ptr)
                graph = stream.end_capture()
            graph.launch(stream)
            stream.synchronize()
            final = (a if args.chain % 2 == 0 else b).get()
            us = device_median_us(lambda g=graph: g.launch(stream), runs=args.reps, warmup=5, stream=stream)
            results[name] = (us, final)
        ref = results["plain"][1]
        row = {"n": n, "iters": iters, "block": block, "chain": args.chain}
        for name, (us, final) in results.items():
            row[name + "_us"] = round(us, 2)
            row[name + "_matches_plain"] = bool(np.array_equal(final, ref))
        row["saved_per_kernel_us"] = round((row["plain_us"] - row["pdl_trigger_us"]) / args.chain, 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    emit_json(rows, Path(args.out_dir) / "pdl_probe.json", echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
