"""A fake CUDA driver for ``fhelium_cupy.runtime._graph_execs`` (no GPU): the entry points it
calls, with their ctypes arguments decoded, logged as plain tuples; any of them can be made
to fail with a CUDA error code."""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

__all__ = ["FakeDriver"]

_handles = itertools.count(0x1000, 0x10)


def _value(arg: Any) -> int:
    """An int from a ctypes handle, pointer-to-handle target, or int."""
    if isinstance(arg, ctypes.c_void_p):
        return int(arg.value or 0)
    return int(arg)


def _out(ref: Any, value: int) -> None:
    ctypes.cast(ref, ctypes.POINTER(ctypes.c_void_p))[0] = value


def _params(ref: Any) -> tuple[int, int, int]:
    from fhelium_cupy.runtime._graph_execs import _Memcpy3D

    p = ctypes.cast(ref, ctypes.POINTER(_Memcpy3D))[0]
    return int(p.dstDevice), int(p.srcDevice), int(p.WidthInBytes)


class FakeDriver:
    """``log`` receives ``(name, *decoded args)`` (and ``sink(entry)`` when given); ``fail[name] =
    code`` makes that entry point return ``code``; ``alive`` holds the graph and executable
    handles not destroyed yet."""

    CONTEXT = 0xC0

    def __init__(self, sink: Any = None) -> None:
        self.log: list = []
        self._sink = sink  # another log to append to as well (a FakeCupy's, while it records)
        self.fail: dict[str, int] = {}
        self.alive: set[int] = set()
        self.roots = 1  # what cuGraphGetRootNodes reports of any graph

    def _result(self, name: str, *args: Any) -> int:
        self.log.append((name, *args))
        if self._sink is not None:
            self._sink((name, *args))
        return self.fail.get(name, 0)

    def check(self, result: int, what: str) -> None:
        if result:
            from fhelium_cupy.runtime._graph_execs import DriverError

            raise DriverError(f"{what}: CUDA_ERROR_FAKE ({result})")

    def ctx_get_current(self, ref: Any) -> int:
        _out(ref, self.CONTEXT)
        return self._result("cuCtxGetCurrent")

    def graph_create(self, ref: Any, flags: int) -> int:
        handle = next(_handles)
        _out(ref, handle)
        self.alive.add(handle)
        return self._result("cuGraphCreate", handle)

    def add_memcpy_node(self, ref: Any, graph: Any, deps: Any, count: int, params: Any, ctx: Any) -> int:
        handle = next(_handles)
        _out(ref, handle)
        return self._result("cuGraphAddMemcpyNode", handle, _value(graph), [int(deps[i] or 0) for i in range(count)],
                            _params(params), _value(ctx))

    def add_child_graph_node(self, ref: Any, graph: Any, deps: Any, count: int, child: Any) -> int:
        handle = next(_handles)
        _out(ref, handle)
        return self._result("cuGraphAddChildGraphNode", handle, _value(graph), [int(deps[i] or 0) for i in range(count)],
                            _value(child))

    def instantiate(self, ref: Any, graph: Any, flags: int) -> int:
        handle = next(_handles)
        if "cuGraphInstantiateWithFlags" not in self.fail:
            _out(ref, handle)
            self.alive.add(handle)
        return self._result("cuGraphInstantiateWithFlags", handle, _value(graph))

    def exec_memcpy_set_params(self, exec_handle: Any, node: Any, params: Any, ctx: Any) -> int:
        return self._result("cuGraphExecMemcpyNodeSetParams", _value(exec_handle), _value(node), _params(params),
                            _value(ctx))

    def launch(self, exec_handle: Any, stream: Any) -> int:
        return self._result("cuGraphLaunch", _value(exec_handle), _value(stream))

    def exec_destroy(self, handle: Any) -> int:
        self.alive.discard(_value(handle))
        return self._result("cuGraphExecDestroy", _value(handle))

    def graph_destroy(self, handle: Any) -> int:
        self.alive.discard(_value(handle))
        return self._result("cuGraphDestroy", _value(handle))

    def get_root_nodes(self, graph: Any, nodes: Any, count: Any) -> int:
        ctypes.cast(count, ctypes.POINTER(ctypes.c_size_t))[0] = self.roots
        return self._result("cuGraphGetRootNodes", _value(graph))

    def mem_alloc(self, ref: Any, nbytes: int) -> int:
        handle = next(_handles) << 8
        if "cuMemAlloc" not in self.fail:
            ctypes.cast(ref, ctypes.POINTER(ctypes.c_uint64))[0] = handle
            self.alive.add(handle)
        return self._result("cuMemAlloc", handle, nbytes)

    def mem_free(self, address: Any) -> int:
        value = int(address.value if hasattr(address, "value") else address)
        self.alive.discard(value)
        return self._result("cuMemFree", value)
