"""close() after a real sticky CUDA error (a kernel writing through a null pointer), in a fresh
process: the CUDA context is unusable afterwards. Programs and pools must still close, raise
the error once, and stay closed (the fake-CuPy tests in test_teardown_host.py pin the order)."""

from __future__ import annotations

import pytest

from tests.helpers.scripts import run_python

pytestmark = pytest.mark.gpu

_SCRIPT = r'''
import os, sys
import cupy as cp
import numpy as np
from fhelium_cupy.runtime import CudaGraphPool, CudaGraphProgram

x = cp.arange(1024, dtype=cp.float32)
alone = CudaGraphProgram.capture(lambda a: a * 2, example_inputs=(x,))
pool = CudaGraphPool(0)
member = CudaGraphProgram.capture(lambda a: a + 1, example_inputs=(x,), pool=pool)
alone.replay(x)
member.replay(x)
cp.cuda.Stream.null.synchronize()
fault = cp.RawKernel(r"""extern "C" __global__ void write_through_null(float* p) { p[threadIdx.x] = 1.0f; }""",
                     "write_through_null")
fault((1,), (32,), (np.uint64(0),))
try:
    cp.cuda.Stream.null.synchronize()
    print("NO-FAULT")
except cp.cuda.runtime.CUDARuntimeError as error:
    print("FAULT", error)
for name, closeable in (("program", alone), ("pool", pool)):
    try:
        closeable.close()
        print(name, "CLOSE-RAISED-NOTHING")
    except Exception as error:
        print(name, "CLOSE-RAISED", type(error).__name__)
    print(name, "CLOSED", closeable.closed, member.closed)
    closeable.close()  # the second close: a no-op
    print(name, "SECOND-CLOSE-OK")
sys.stdout.flush()
os._exit(0)  # the context is dead: skip the interpreter's teardown of CuPy
'''


def test_programs_and_pools_close_after_a_sticky_error_and_raise_it_once():
    result = run_python("-c", _SCRIPT, timeout=120)
    out = result.stdout
    assert result.returncode == 0, result.stderr[-3000:]
    assert "FAULT" in out and "NO-FAULT" not in out, out
    for name in ("program", "pool"):
        assert f"{name} CLOSE-RAISED CUDARuntimeError" in out, out
        assert f"{name} SECOND-CLOSE-OK" in out, out
    assert "program CLOSED True False" in out, out  # the pool's member stays until the pool closes
    assert "pool CLOSED True True" in out, out
