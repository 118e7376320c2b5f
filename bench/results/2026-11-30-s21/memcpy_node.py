"""Host cost of a replay's input copy as a memcpy node inside the graph, its source updated per
replay (``cudaGraphExecMemcpyNodeSetParams1D`` through ctypes), against the ``cudaMemcpyAsync``
that ``replay()`` issues before ``Graph.launch`` today (round 25: 4.2-4.5 us of the call's
11-12 us on a quick vCPU). A synthetic graph like example 18's in size: a 2 MiB input copy and
46 small kernels. Each variant is issued back to back (``time_host_pipelined``, drained every 8,
1024 runs after 64 warmups), three rounds alternated; the source alternates between two
buffers so every update changes the node, and the copied values are checked after each
variant. Device time of both graphs beside it.

(It ran with its own copy of ``bench.kernels_gpu.capture_private``: one private pool for both
graphs instead of one each.)

Usage, from the repository root (pinned, as the other probes):
    taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/results/2026-11-30-s21/memcpy_node.py
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import alternate, graph_device_us  # noqa: E402
from bench._timing import host_loop_us, time_host_pipelined  # noqa: E402
from bench.kernels_gpu import capture_private  # noqa: E402

MEMCPY_NODE = 1  # cudaGraphNodeTypeMemcpy
D2D = 3


def cudart() -> ctypes.CDLL:
    """The CUDA runtime library this process already maps, else one on disk (graph handles are
    driver objects: any runtime instance on the same primary context can update them)."""
    with open("/proc/self/maps") as maps:
        loaded = sorted({line.split()[-1] for line in maps if "libcudart.so" in line})
    found = loaded + glob.glob(f"{sys.prefix}/lib/python3*/site-packages/nvidia/**/libcudart.so*", recursive=True) \
        + glob.glob("/usr/local/lib/python3*/dist-packages/nvidia/**/libcudart.so*", recursive=True) \
        + glob.glob("/usr/local/cuda/lib64/libcudart.so*") + [ctypes.util.find_library("cudart") or ""]
    for path in filter(None, found):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        print("cudart:", path, "(already mapped)" if path in loaded else "", flush=True)
        return lib
    raise SystemExit("no libcudart found")


def memcpy_node(lib: ctypes.CDLL, graph: int) -> ctypes.c_void_p:
    count = ctypes.c_size_t(0)
    assert lib.cudaGraphGetNodes(ctypes.c_void_p(graph), None, ctypes.byref(count)) == 0
    nodes = (ctypes.c_void_p * count.value)()
    assert lib.cudaGraphGetNodes(ctypes.c_void_p(graph), nodes, ctypes.byref(count)) == 0
    kinds = []
    for node in nodes:
        kind = ctypes.c_int(-1)
        assert lib.cudaGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)) == 0
        kinds.append(kind.value)
    print(f"graph nodes: {count.value}, memcpy nodes: {kinds.count(MEMCPY_NODE)}", flush=True)
    return ctypes.c_void_p(nodes[kinds.index(MEMCPY_NODE)])


def main() -> None:
    rt = cupy.cuda.runtime
    lib = cudart()
    s = cupy.cuda.Stream(non_blocking=True)
    nbytes = 2 << 20
    srcs = [cupy.full(nbytes // 8, i + 1, dtype=cupy.uint64) for i in range(2)]
    static = cupy.zeros(nbytes // 8, dtype=cupy.uint64)
    work = cupy.zeros(4096, dtype=cupy.uint64)

    def body() -> None:
        for _ in range(46):
            work[...] += 1

    def copy_then_body() -> None:
        rt.memcpyAsync(static.data.ptr, srcs[0].data.ptr, nbytes, D2D, s.ptr)
        body()

    with s:
        body()
        s.synchronize()
    captured = {"plain": capture_private(cupy, body, s), "node": capture_private(cupy, copy_then_body, s)}
    graphs = {name: graph for name, (graph, _) in captured.items()}
    node = memcpy_node(lib, graphs["node"].graph)
    set_params = lib.cudaGraphExecMemcpyNodeSetParams1D
    set_params.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.c_int]
    exec_node = ctypes.c_void_p(graphs["node"].graphExec)
    dst = ctypes.c_void_p(static.data.ptr)
    src_ptrs = [ctypes.c_void_p(a.data.ptr) for a in srcs]

    def cycler():
        return itertools.cycle(range(2))

    def copy_then_launch():
        k = cycler()

        def run():
            rt.memcpyAsync(static.data.ptr, srcs[next(k)].data.ptr, nbytes, 4, s.ptr)
            graphs["plain"].launch(s)
        return run

    def update_then_launch():
        k = cycler()

        def run():
            err = set_params(exec_node, node, dst, src_ptrs[next(k)], nbytes, D2D)
            if err:
                raise RuntimeError(f"cudaGraphExecMemcpyNodeSetParams1D: error {err}")
            graphs["node"].launch(s)
        return run

    def update_only():
        k = cycler()
        return lambda: set_params(exec_node, node, dst, src_ptrs[next(k)], nbytes, D2D)

    def copy_only():
        k = cycler()
        return lambda: rt.memcpyAsync(static.data.ptr, srcs[next(k)].data.ptr, nbytes, 4, s.ptr)

    variants = {"memcpyAsync + launch": copy_then_launch(), "node update + launch": update_then_launch(),
                "launch (node graph)": lambda: graphs["node"].launch(s),
                "launch (plain graph)": lambda: graphs["plain"].launch(s),
                "node update alone": update_only(), "memcpyAsync alone": copy_only()}

    for k in (1, 0):  # the update's values arrive: the node copies the source it was last given
        assert set_params(exec_node, node, dst, src_ptrs[k], nbytes, D2D) == 0
        graphs["node"].launch(s)
        s.synchronize()
        assert int(static[0]) == k + 1 and int(static[-1]) == k + 1, "the updated node copied the wrong source"
    print("node update checked: the launch copies the source last set", flush=True)

    def measure(name: str) -> float:
        return time_host_pipelined(variants[name], runs=1024, warmup=64, drain=s.synchronize, every=8)["median_us"]

    print("host us per call (median, drained every 8)", flush=True)
    alternate(list(variants), 3, measure)
    print("graph device us", flush=True)
    alternate(["plain", "node"], 3, lambda name: graph_device_us(graphs[name], s))
    print("host loop", host_loop_us(), flush=True)


if __name__ == "__main__":
    main()
