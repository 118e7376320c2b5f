"""Probe: can the runtime, not the CKKS backend, give a captured graph its single root?

Example 18's program (8x8 matvec at N=2^14, seven rotations on parallel branches) captured
twice: as the backend does it now (``graph_fork_root``, a no-op kernel, before the fork: one
kernel root) and without that kernel (``bench._example18.without_fork_root``: the branches are
the roots). The second is launched bare and through driver-built top-level executables whose
one root precedes the captured graph as a child node: an 8-byte device memcpy, an empty node,
a child graph holding one no-op kernel; and the memcpy root ahead of the first form, as
``replay()``'s input-copy executables put it. Host us per launch, cold (each after a
synchronize, as ``bench/matvec.py`` times ``replay_prepared``) and pipelined (drained every
8), and device us (CUDA events), alternated in one process; every executable's output
checked bit-identical to the eager call.

Usage, from the repository root:
    taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/results/2026-11-30-s22/graph_root.py
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from bench._example18 import alternate, example18, without_fork_root  # noqa: E402
from bench._timing import device_median_us, host_loop_us, time_host, time_host_pipelined  # noqa: E402
from fhelium_cupy.runtime import _input_nodes  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402

vp = ctypes.c_void_p
NOOP = cupy.RawKernel('extern "C" __global__ void noop() {}', "noop")


def root_count(drv, graph):
    count = ctypes.c_size_t(0)
    drv.check(drv.get_root_nodes(vp(graph.graph), None, ctypes.byref(count)), "cuGraphGetRootNodes")
    return count.value


def wrapped(drv, graph, root, scratch):
    """An executable of [root] -> [child: graph]; root in {"memcpy", "empty", "kernel"}."""
    top, node = vp(), vp()
    drv.check(drv.graph_create(ctypes.byref(top), 0), "create")
    ctx = vp()
    drv.check(drv.ctx_get_current(ctypes.byref(ctx)), "ctx")
    if root == "memcpy":
        params = _input_nodes.copy_params(scratch.data.ptr + 8, scratch.data.ptr, 8)
        drv.check(drv.add_memcpy_node(ctypes.byref(node), top, None, 0, ctypes.byref(params), ctx), "memcpy")
    elif root == "empty":
        drv.check(drv.add_empty_node(ctypes.byref(node), top, None, 0), "empty")
    else:
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            NOOP((1,), (1,), ())
            tiny = stream.end_capture()
        drv.check(drv.add_child_graph_node(ctypes.byref(node), top, None, 0, vp(tiny.graph)), "kernel child")
    child = vp()
    drv.check(drv.add_child_graph_node(ctypes.byref(child), top, (vp * 1)(node), 1, vp(graph.graph)), "child")
    exe = vp()
    drv.check(drv.instantiate(ctypes.byref(exe), top, 0), "instantiate")
    return exe


def main():
    drv = _input_nodes.driver()
    assert drv is not None
    P, sz = ctypes.POINTER, ctypes.c_size_t
    drv.get_root_nodes = drv._fn("cuGraphGetRootNodes", [vp, P(vp), P(sz)])
    drv.add_empty_node = drv._fn("cuGraphAddEmptyNode", [P(vp), vp, P(vp), sz])
    engine, _, ct, fn, want = example18()
    programs = {"fork root": CudaGraphProgram.capture(fn, example_inputs=(ct,))}
    backend = engine.backend
    launch = backend._launch
    backend._launch = without_fork_root(launch)
    try:
        assert np.array_equal(fn(ct).data.get(), want)
        programs["branch roots"] = CudaGraphProgram.capture(fn, example_inputs=(ct,))
    finally:
        backend._launch = launch
    for name, program in programs.items():
        print(f"{name}: {root_count(drv, program.cuda_graph)} root node(s)", flush=True)
    stream = cupy.cuda.Stream(non_blocking=True)
    scratch = cupy.zeros(2, dtype=cupy.uint64)
    multi, single = programs["branch roots"], programs["fork root"]
    for program in programs.values():  # the payload every launch below computes on
        program.replay(ct, synchronize=True)
    execs = {f"{root} root + branch roots": wrapped(drv, multi.cuda_graph, root, scratch)
             for root in ("memcpy", "empty", "kernel")}
    execs["memcpy root + fork root"] = wrapped(drv, single.cuda_graph, "memcpy", scratch)

    def via(exe):
        arg, sarg = vp(exe.value), vp(stream.ptr)
        return lambda: drv.launch(arg, sarg)

    launches = {"fork root, Graph.launch": lambda: single.cuda_graph.launch(stream),
                "branch roots, Graph.launch": lambda: multi.cuda_graph.launch(stream),
                **{name: via(exe) for name, exe in execs.items()}}
    for name, call in launches.items():
        out = multi.output if "branch" in name else single.output
        out.data.fill(0)
        call()
        stream.synchronize()
        assert np.array_equal(out.data.get(), want), name
    print("every launch form bit-identical to the eager call", flush=True)

    def cold(call, runs=200, warmup=10):  # each call on a drained stream
        return time_host(call, runs=runs, warmup=warmup, synchronize=stream.synchronize,
                         sync_inside=False)["median_ms"] * 1e3

    def measure(key):
        if key == "host loop":
            return host_loop_us()
        name, mode = key.rsplit(" | ", 1)
        call = launches[name]
        if mode == "cold":
            return cold(call)
        if mode == "piped":
            return time_host_pipelined(call, runs=512, warmup=32, drain=stream.synchronize, every=8)["median_us"]
        return device_median_us(call, runs=40, warmup=3, stream=stream)

    keys = [f"{name} | {mode}" for mode in ("cold", "piped", "device") for name in launches] + ["host loop"]
    alternate(keys, 4, measure, digits=2)
    stream.synchronize()
    for exe in execs.values():
        drv.exec_destroy(exe)
    for program in programs.values():
        program.close()


if __name__ == "__main__":
    main()
