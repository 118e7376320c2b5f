"""Device tables a captured graph reads by address, kept alive by the program that captured them.

A CUDA graph holds device addresses, not Python references (the CuPy capture pitfall "the
graph holds no references to its arrays"). The program keeps its inputs, outputs, arena
and callable, but library code may also hand kernels the address of a *cached* device
table (a table of key addresses, a table of constants) that only its cache references: if
the cache later evicts the entry, eager code can be handed that memory while replays still
read it. Such code calls :func:`retain_for_capture` on every table it passes; while
``CudaGraphProgram`` captures, the runtime collects them (:func:`collecting`) and the
program holds them until it is closed. Outside a capture the call does nothing.

Thread-local: a capture collects only what its own thread looks up.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["collecting", "is_collecting", "retain_for_capture"]

_LOCAL = threading.local()
_ACTIVE = 0  # collecting() blocks open in any thread: eager lookups (none open) return at once
_ACTIVE_LOCK = threading.Lock()


def retain_for_capture(*objs: Any) -> None:
    """Keep ``objs`` alive as long as the program being captured on this thread (if any); an
    object already kept by this capture is not added again (a table looked up per launch).

    Called on every cached-table lookup of the kernel launch path: outside a capture it is
    one global read."""
    if _ACTIVE:
        kept = getattr(_LOCAL, "kept", None)
        if kept is not None:
            for obj in objs:  # kept objects stay alive, so their ids are not reused
                kept.setdefault(id(obj), obj)


def is_collecting() -> bool:
    """Whether a capture on this thread is collecting (inside a :func:`collecting` block)."""
    return bool(_ACTIVE) and getattr(_LOCAL, "kept", None) is not None


@contextlib.contextmanager
def collecting() -> Iterator[list[Any]]:
    """Collect what :func:`retain_for_capture` receives on this thread inside the block; the
    yielded list holds it, each object once in first-seen order, when the block exits."""
    global _ACTIVE
    previous = getattr(_LOCAL, "kept", None)
    kept: dict[int, Any] = {}
    _LOCAL.kept = kept
    result: list[Any] = []
    with _ACTIVE_LOCK:
        _ACTIVE += 1
    try:
        yield result
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE -= 1
        _LOCAL.kept = previous
        result.extend(kept.values())
