"""Further executables of a program's captured graph, built through the CUDA driver: its input
copies as memcpy nodes (``InputCopyGraph``) and a single root for a graph with several
(``RootedGraph``). Both put the captured graph as a child node behind nodes of their own.

``replay()`` copies each input leaf into the fixed input storage and then launches the graph.
Issued as ``cudaMemcpyAsync`` calls, the copies cost 4-6 us of host time each (measured on the
H200, any size: ``bench/results/2026-11-30-s20/replay_steps``), the largest part of a replay's
host time. Here the copies are nodes of the graph instead: a top-level graph holds one memcpy
node per non-empty leaf, in a chain, and the captured graph as a child node after them; it is
instantiated a few times. For device-resident sources a replay launches the executable whose
nodes already copy from those addresses, or points the least recently used one's nodes at
them first (``cuGraphExecMemcpyNodeSetParams``); the launch then does the copies on the
device (``bench/results/2026-11-30-s21/memcpy_node.log``: update and launch 6.4 us against
copy and launch 9.5 us on a slow vCPU, the launch alone 2.8 us).

A captured graph whose first work is a fork (CuPy work on several streams, the CKKS backend's
parallel rotations) has every branch's first node as a root, and the driver launches it at
three times the host time of the same graph behind one memcpy or kernel node
(``bench/results/2026-11-30-s22/graph_root.log``: 5.8-6.7 us against 1.7-2.1 us; an empty
node as the root does not help). Such a graph gets ``RootedGraph``: one 8-byte memcpy node
ahead of it. The input-copy executables have a single root already: their first copy.

The CUDA driver API is reached through ``ctypes`` (``libcuda.so.1``, which every driver
installs); CuPy wraps none of these calls but the launch, which programs pass in as CuPy's
``runtime.graphLaunch``: through ``ctypes`` a launch costs 1.4 us more host time
(``bench/results/2026-11-30-s22/root_ab3.log``: 3.44 against 2.00 us). Anything missing or
refused makes ``build`` return ``None`` and the program keeps the captured graph and its
``cudaMemcpyAsync`` copies.
``FHELIUM_CUPY_GRAPH_INPUT_NODES=0`` turns the input nodes off and ``FHELIUM_CUPY_GRAPH_ROOT=0``
the root (A/B measurements).

Ownership: each object owns its top-level graph and executables (and the root's 16 bytes) and
releases them in ``close()`` (idempotent; an executable still in flight is freed by the driver
when it completes). The captured graph is cloned into the child node, so the caller's graph
may go away first. Stream semantics: ``launch`` enqueues on the stream it is given, like
``Graph.launch``; ordering against earlier work is the caller's.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ..interop.arrays import device_pointer

__all__ = ["InputCopyGraph", "RootedGraph", "driver", "driver_launch"]

ENV_SWITCH = "FHELIUM_CUPY_GRAPH_INPUT_NODES"
ROOT_SWITCH = "FHELIUM_CUPY_GRAPH_ROOT"
_MEMORY_DEVICE = 2  # CU_MEMORYTYPE_DEVICE


class _Memcpy3D(ctypes.Structure):
    """``CUDA_MEMCPY3D`` (cuda.h), used for 1-D device-to-device copies."""

    _fields_ = [
        ("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t), ("srcZ", ctypes.c_size_t),
        ("srcLOD", ctypes.c_size_t), ("srcMemoryType", ctypes.c_int), ("srcHost", ctypes.c_void_p),
        ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p), ("reserved0", ctypes.c_void_p),
        ("srcPitch", ctypes.c_size_t), ("srcHeight", ctypes.c_size_t),
        ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t), ("dstZ", ctypes.c_size_t),
        ("dstLOD", ctypes.c_size_t), ("dstMemoryType", ctypes.c_int), ("dstHost", ctypes.c_void_p),
        ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p), ("reserved1", ctypes.c_void_p),
        ("dstPitch", ctypes.c_size_t), ("dstHeight", ctypes.c_size_t),
        ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t), ("Depth", ctypes.c_size_t),
    ]


def copy_params(dst: int, src: int, nbytes: int) -> _Memcpy3D:
    """A 1-D device-to-device ``CUDA_MEMCPY3D`` of ``nbytes`` from ``src`` to ``dst``."""
    return _Memcpy3D(srcMemoryType=_MEMORY_DEVICE, srcDevice=src, srcPitch=nbytes, srcHeight=1,
                     dstMemoryType=_MEMORY_DEVICE, dstDevice=dst, dstPitch=nbytes, dstHeight=1,
                     WidthInBytes=nbytes, Height=1, Depth=1)


class DriverError(RuntimeError):
    """A CUDA driver call returned an error (its name and number in the message)."""


class _Driver:
    """The few ``libcuda`` entry points the input nodes need, with their C signatures."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        p, vp, sz = ctypes.POINTER, ctypes.c_void_p, ctypes.c_size_t
        self._lib = lib
        self._name = self._fn("cuGetErrorName", [ctypes.c_int, p(ctypes.c_char_p)])
        self.ctx_get_current = self._fn("cuCtxGetCurrent", [p(vp)])
        self.graph_create = self._fn("cuGraphCreate", [p(vp), ctypes.c_uint])
        self.add_memcpy_node = self._fn("cuGraphAddMemcpyNode", [p(vp), vp, p(vp), sz, p(_Memcpy3D), vp])
        self.add_child_graph_node = self._fn("cuGraphAddChildGraphNode", [p(vp), vp, p(vp), sz, vp])
        self.instantiate = self._fn("cuGraphInstantiateWithFlags", [p(vp), vp, ctypes.c_ulonglong])
        self.exec_memcpy_set_params = self._fn("cuGraphExecMemcpyNodeSetParams", [vp, vp, p(_Memcpy3D), vp])
        self.launch = self._fn("cuGraphLaunch", [vp, vp])
        self.exec_destroy = self._fn("cuGraphExecDestroy", [vp])
        self.graph_destroy = self._fn("cuGraphDestroy", [vp])
        self.get_root_nodes = self._fn("cuGraphGetRootNodes", [vp, p(vp), p(sz)])
        self.mem_alloc = self._fn("cuMemAlloc_v2", [p(ctypes.c_uint64), sz])
        self.mem_free = self._fn("cuMemFree_v2", [ctypes.c_uint64])

    def _fn(self, name: str, argtypes: list[Any]) -> Any:
        fn = getattr(self._lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
        return fn

    def check(self, result: int, what: str) -> None:
        if result:
            name = ctypes.c_char_p()
            self._name(result, ctypes.byref(name))
            raise DriverError(f"{what}: {(name.value or b'CUDA_ERROR').decode()} ({result})")


_DRIVER: list[_Driver | None] = []


def driver() -> _Driver | None:
    """The process's ``libcuda`` entry points (loaded once), or None without a driver."""
    if not _DRIVER:
        try:
            _DRIVER.append(_Driver(ctypes.CDLL("libcuda.so.1")))
        except (OSError, AttributeError):
            _DRIVER.append(None)
    return _DRIVER[0]


def driver_launch(drv: Any) -> Callable[[int, int], None]:
    """``launch(exec_handle, stream_ptr)`` through ``cuGraphLaunch`` (raises ``DriverError``).
    Programs pass CuPy's ``runtime.graphLaunch`` instead: the same call without ctypes'
    argument conversion (driver and runtime graph handles are interchangeable)."""
    fn, vp = drv.launch, ctypes.c_void_p

    def launch(exec_handle: int, stream_ptr: int) -> None:
        result = fn(vp(exec_handle), vp(stream_ptr))
        if result:
            drv.check(result, "cuGraphLaunch")

    return launch


def _destroy(drv: Any, handles: list[int]) -> None:
    """Finalizer of an ``InputCopyGraph``: ``handles`` = its executables, then their graph
    last (never raises)."""
    *execs, graph = handles
    handles[:] = [0] * len(handles)
    for exec_handle in execs:
        if exec_handle:
            drv.exec_destroy(ctypes.c_void_p(exec_handle))
    if graph:
        drv.graph_destroy(ctypes.c_void_p(graph))


def _behind_copies(drv: Any, ctx: Any, graph: int, params: Sequence[_Memcpy3D],
                   instances: int) -> tuple[int, list[int], list[int]]:
    """A top-level graph holding one memcpy node per ``params`` (a chain: the first is its only
    root) and then the captured ``cudaGraph_t`` ``graph`` as a child node, instantiated
    ``instances`` times in context ``ctx``: ``(graph, memcpy nodes, executables)``. Raises
    ``DriverError`` with nothing left allocated when the driver refuses a step."""
    vp = ctypes.c_void_p
    top = vp()
    nodes: list[int] = []
    execs: list[int] = []
    try:
        drv.check(drv.graph_create(ctypes.byref(top), 0), "cuGraphCreate")
        for node_params in params:
            node, deps = vp(), (vp * 1)(*nodes[-1:])
            drv.check(drv.add_memcpy_node(ctypes.byref(node), top, deps, len(nodes[-1:]), ctypes.byref(node_params),
                                          ctx), "cuGraphAddMemcpyNode")
            nodes.append(int(node.value or 0))
        child = vp()
        drv.check(drv.add_child_graph_node(ctypes.byref(child), top, (vp * 1)(nodes[-1]), 1, vp(graph)),
                  "cuGraphAddChildGraphNode")
        for _ in range(instances):
            exec_handle = vp()
            drv.check(drv.instantiate(ctypes.byref(exec_handle), top, 0), "cuGraphInstantiateWithFlags")
            execs.append(int(exec_handle.value or 0))
    except DriverError:
        _destroy(drv, [*execs, int(top.value or 0)])
        raise
    return int(top.value or 0), nodes, execs


class InputCopyGraph:
    """The captured graph behind one memcpy node per input leaf, as its own executables.

    ``copy_plan`` is the input buffer's: ``(leaf index, target address, low offset, bytes)``
    per non-empty leaf, the source of leaf ``i`` being ``data_pointer(leaf) - offset``. The
    nodes form a chain (the first copy is the graph's only root: the driver launches a graph
    with one kernel or memcpy root quickest, ``perf_notes`` round 23) ahead of the child node.

    The graph is instantiated ``EXECUTABLES`` times, each executable keeping the sources its
    nodes were last pointed at: a replay takes the one whose sources are the replay's (no
    update), else updates the least recently used one. So a pipeline that cycles through up to
    that many input arrays (a new ciphertext per call, its storage reused by CuPy's pool once
    the replay that read it completed) never updates a node once each executable has seen its
    array. The executables share the graph's memory: replays are serialized by the program's
    stream order and events, never concurrent.

    Not thread-safe: one program replays from one host thread (its documented contract).
    """

    EXECUTABLES = 4

    def __init__(self, drv: Any, ctx: int, graph: int, execs: Sequence[int], nodes: Sequence[int],
                 copy_plan: Sequence[tuple[int, int, int, int]], params: Sequence[_Memcpy3D], device_index: int,
                 pointer: Callable[[Any, int], int | None], launch: Callable[[int, int], Any]) -> None:
        self._drv = drv
        self._ctx = ctypes.c_void_p(ctx)
        self._handles = [*execs, graph]
        self._nodes = tuple(ctypes.c_void_p(node) for node in nodes)
        self._params = tuple(params)  # each node's CUDA_MEMCPY3D, its srcDevice set by updates
        self._refs = tuple(ctypes.byref(params) for params in self._params)
        self._leaves = tuple((i, offset) for i, _, offset, _ in copy_plan)
        # [executable, the source each of its nodes copies now (None: not set yet)], most
        # recently launched first
        self._slots: list[tuple[int, list[int | None]]] = [(e, [None] * len(copy_plan)) for e in execs]
        self._pointer = pointer
        self._device_index = device_index
        self._launch = launch
        self.updates = 0  # node updates issued (a replay from sources an executable holds issues none)
        self._finalizer = weakref.finalize(self, _destroy, drv, self._handles)

    @classmethod
    def build(cls, graph: Any, copy_plan: Sequence[tuple[int, int, int, int]], device_index: int,
              pointer: Callable[[Any, int], int | None] = device_pointer, drv: Any = None,
              launch: Callable[[int, int], Any] | None = None) -> InputCopyGraph | None:
        """The input-copy executables of the captured ``cupy.cuda.Graph`` ``graph`` (its
        ``graph`` handle is cloned into a child node) on the current device, ``device_index``,
        or ``None`` when the switch is off, there is nothing to copy, or the driver lacks or
        refuses a step (then nothing is left allocated). ``pointer(leaf, device_index)``: a
        leaf's element-0 address when it is device memory there, else None
        (``interop.arrays.device_pointer``). ``launch(exec_handle, stream_ptr)`` launches an
        executable (default ``driver_launch``)."""
        handle = getattr(graph, "graph", None)  # (the cudaGraph_t of a cupy.cuda.Graph)
        if os.environ.get(ENV_SWITCH, "1") == "0" or not copy_plan or not isinstance(handle, int) or not handle:
            return None
        drv = driver() if drv is None else drv
        if drv is None:
            return None
        ctx = ctypes.c_void_p()
        params = [copy_params(low, low, span) for _, low, _, span in copy_plan]  # (self-copies until a replay)
        try:
            drv.check(drv.ctx_get_current(ctypes.byref(ctx)), "cuCtxGetCurrent")
            top, nodes, execs = _behind_copies(drv, ctx, handle, params, cls.EXECUTABLES)
        except DriverError:
            return None
        return cls(drv, int(ctx.value or 0), top, execs, nodes, copy_plan, params, device_index,
                   pointer, driver_launch(drv) if launch is None else launch)

    def device_sources(self, leaves: Sequence[Any]) -> list[int] | None:
        """Each node's source address for the validated ``leaves``, or ``None`` when a leaf is
        not device memory of this graph's device (the copies are then the caller's)."""
        pointer, index = self._pointer, self._device_index
        sources = []
        for i, offset in self._leaves:
            address = pointer(leaves[i], index)
            if address is None:
                return None
            sources.append(address - offset)
        return sources

    def launch(self, wanted: list[int], stream_ptr: int) -> None:
        """Launch on ``stream_ptr`` the executable whose nodes copy from ``wanted``
        (``device_sources``) already, or the least recently used one after pointing its nodes
        at them. Raises ``DriverError`` before the launch when an update is refused (nothing
        was launched then); a refused launch raises what the ``launch`` function raises."""
        slot = self._slots[0]
        if slot[1] != wanted:  # (the common case, the same sources again, costs one comparison)
            slot = self._select(wanted)
        self._launch(slot[0], stream_ptr)

    def _select(self, wanted: list[int]) -> tuple[int, list[int | None]]:
        """The executable whose nodes copy from ``wanted``, else the least recently used one
        pointed at it; moved to the front either way."""
        slots = self._slots
        for position, slot in enumerate(slots):
            if slot[1] == wanted:
                slots.insert(0, slots.pop(position))
                return slot
        slot = slots.pop()
        slots.insert(0, slot)
        self._point(slot, wanted)
        return slot

    def _point(self, slot: tuple[int, list[int | None]], wanted: list[int]) -> None:
        exec_handle, sources = slot[0], slot[1]
        drv = self._drv
        for k, src in enumerate(wanted):
            if src != sources[k]:
                params = self._params[k]
                params.srcDevice = src
                sources[k] = None  # unknown until the driver took it
                drv.check(drv.exec_memcpy_set_params(exec_handle, self._nodes[k], self._refs[k], self._ctx),
                          "cuGraphExecMemcpyNodeSetParams")
                sources[k] = src
                self.updates += 1

    def close(self) -> None:
        """Destroy the executables and their graph. Idempotent."""
        self._finalizer()


def root_count(drv: Any, graph: int) -> int:
    """How many root nodes the ``cudaGraph_t`` ``graph`` has (raises ``DriverError``)."""
    count = ctypes.c_size_t(0)
    drv.check(drv.get_root_nodes(ctypes.c_void_p(graph), None, ctypes.byref(count)), "cuGraphGetRootNodes")
    return int(count.value)


def _release_root(drv: Any, handles: list[int]) -> None:
    """Finalizer of a ``RootedGraph``: ``handles`` = its executable, graph and 16 bytes (never raises)."""
    exec_handle, graph, scratch = handles
    handles[:] = [0, 0, 0]
    _destroy(drv, [exec_handle, graph])
    if scratch:
        drv.mem_free(ctypes.c_uint64(scratch))


class RootedGraph:
    """The captured graph behind one memcpy node, as an executable of its own: the launch of a
    graph that has several roots (``launch(stream)`` takes the place of ``Graph.launch``).

    The node copies 8 bytes between the two halves of a 16-byte allocation of its own
    (``cuMemAlloc``; nothing reads them); example 18's graph ran 256.0 us on the device behind
    it as without it. Replays through this executable are serialized by the program's stream
    order and events, as those of the captured graph are. Not thread-safe (one program
    replays from one host thread). Its owner closes it (or drops it) only after the last
    launch completed, since the node's bytes are freed then: the program waits for its last
    replay first, in ``close()`` and in its finalizer.
    """

    def __init__(self, drv: Any, graph: int, exec_handle: int, scratch: int,
                 launch: Callable[[int, int], Any]) -> None:
        self._exec = exec_handle
        self._launch = launch
        self._handles = [exec_handle, graph, scratch]
        self._finalizer = weakref.finalize(self, _release_root, drv, self._handles)

    @classmethod
    def build(cls, graph: Any, drv: Any = None, launch: Callable[[int, int], Any] | None = None) -> RootedGraph | None:
        """The rooted executable of the captured ``cupy.cuda.Graph`` ``graph`` on the current
        device, or ``None`` when the switch is off, the graph has one root (or none) already,
        or the driver lacks or refuses a step (then nothing is left allocated).
        ``launch(exec_handle, stream_ptr)`` launches it (default ``driver_launch``)."""
        handle = getattr(graph, "graph", None)  # (the cudaGraph_t of a cupy.cuda.Graph)
        if os.environ.get(ROOT_SWITCH, "1") == "0" or not isinstance(handle, int) or not handle:
            return None
        drv = driver() if drv is None else drv
        if drv is None:
            return None
        ctx, scratch = ctypes.c_void_p(), ctypes.c_uint64(0)
        try:
            if root_count(drv, handle) <= 1:
                return None
            drv.check(drv.ctx_get_current(ctypes.byref(ctx)), "cuCtxGetCurrent")
            drv.check(drv.mem_alloc(ctypes.byref(scratch), 16), "cuMemAlloc")
            root = copy_params(scratch.value + 8, scratch.value, 8)
            top, _, (exec_handle,) = _behind_copies(drv, ctx, handle, [root], 1)
        except DriverError:
            if scratch.value:
                drv.mem_free(scratch)
            return None
        return cls(drv, top, exec_handle, int(scratch.value), driver_launch(drv) if launch is None else launch)

    def launch(self, stream: Any) -> None:
        """Launch on the CuPy stream ``stream`` (as ``Graph.launch``); raises what the
        ``launch`` function raises."""
        self._launch(self._exec, stream.ptr)

    def close(self) -> None:
        """Destroy the executable and its graph and free the root's bytes. Idempotent."""
        self._finalizer()
