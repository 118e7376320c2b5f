"""Shared graph scratch for sequential CUDA Graph programs, ordered by one event chain."""

from __future__ import annotations

import weakref
from typing import Any

from ..errors import ExecutionError
from ..interop.capabilities import require_cupy
from ..interop.devices import Device, as_device
from ._teardown import TeardownErrors
from .arena import GraphArena

__all__ = ["CudaGraphPool"]


class CudaGraphPool:
    """Own shared temporary storage for sequential CUDA Graph programs.

    Programs captured with ``CudaGraphProgram.capture(..., pool=pool)`` allocate their
    captured temporaries from this pool's :class:`~fhelium_cupy.runtime.arena.GraphArena`,
    so one program's scratch is reused by the next. Each program keeps its own input
    buffer and its own retained output storage *outside* the scratch (allocated from its
    last warmup output and filled by device copies at the end of its graph), so replay
    order may differ from capture order without overwriting another program's output.

    Sizing: the scratch grows by whole chunks of device memory that never merge, so a
    member that needs more than the free space of every chunk so far gets a chunk of its
    own size. Capture the largest member first: then the others fit in its chunk and the
    pool holds about the largest member's scratch (members captured in increasing size hold
    the sum of their chunks; measured on the fakes: 1, 3, 5 and 7 MiB of temporaries took
    20 MiB in that order, 8 MiB in the other).

    Ordering: an event chain serializes scratch use across caller-selected streams.
    Every member replay first waits (on its stream, without blocking the host) for the
    pool's last replay-complete event, then records its own completion as the new last
    event. Programs in one pool therefore never run concurrently on the GPU.

    Ownership: one host thread controls a pool; concurrent workers use separate pools.
    Persistent resources are prepared outside capture; captured intermediates must not
    escape into application state outside the returned output tree (they live in shared
    scratch that the next member overwrites). The pool tracks its members through weak
    references and never extends their lifetimes.

    Args:
        device: CUDA device of the scratch (``int``, ``"cuda"``, ``"cuda:N"``,
            ``cupy.cuda.Device`` or ``torch.device``).

    Raises:
        ValueError: ``device`` is not a CUDA device.
        CudaUnavailableError: CuPy or a GPU is missing.
    """

    def __init__(self, device: object = "cuda") -> None:
        resolved = as_device(device)
        if resolved.type != "cuda":
            raise ValueError(f"CudaGraphPool needs a CUDA device, got {resolved}")
        require_cupy("CudaGraphPool")
        self._device = resolved
        self._arena = GraphArena(resolved)
        self._members: weakref.WeakSet[Any] = weakref.WeakSet()
        # The chain: the event recorded after the latest member replay, and the stream it was
        # recorded on (stream_identity: a replay on that same stream needs no wait).
        self._last_event: Any = None
        self._last_stream: object = None
        self._closed = False

    @property
    def device(self) -> Device:
        """CUDA device owning the pool's scratch storage (a ``Device``: the string ``"cuda:N"``,
        equal to the ``torch.device`` and accepted by torch)."""
        return self._device

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def scratch_reserved_bytes(self) -> int:
        """Device bytes held as shared scratch (all members together)."""
        return self._arena.reserved_bytes

    def _require_open(self) -> None:
        if self._closed:
            raise ExecutionError("CudaGraphPool is closed; create a new CudaGraphPool for new captures")

    # -- the scratch chain (members' replays, in the order they were enqueued) ------------

    def _chain_event(self) -> Any:
        """The event recorded after the newest member replay (None before the first)."""
        return self._last_event

    def _wait_for_chain(self, runtime: Any, stream_ptr: int, ident: object) -> None:
        """Order the stream ``stream_ptr`` (``stream_identity`` ``ident``) after the newest member
        replay (scratch is shared); nothing to do on the stream that replay ran on."""
        if self._last_event is not None and self._last_stream != ident:
            runtime.streamWaitEvent(stream_ptr, self._last_event.ptr, 0)

    def _extend_chain(self, event: Any, ident: object) -> None:
        """``event`` (recorded after a member replay on the stream of ``stream_identity``
        ``ident``) is now the newest."""
        self._last_event = event
        self._last_stream = ident

    def _register(self, program: Any) -> None:
        self._members.add(program)

    def _forget(self, program: Any) -> None:
        self._members.discard(program)

    def close(self) -> None:
        """Wait for scratch users and close this pool's live member programs. Idempotent.

        Each live member is closed (which waits for its last replay); then the pool
        waits for its last chain event and releases the scratch. Members that were
        already garbage-collected are not resurrected. If a wait fails (a CUDA error), every
        member and the scratch are still released and the pool closed; the first such error
        is raised afterwards, once (not from ``__exit__`` while another exception propagates).
        """
        self._close(raise_errors=True)

    def _close(self, *, raise_errors: bool) -> None:
        if self._closed:
            return
        errors = TeardownErrors()
        for program in list(self._members):
            errors.run(program.close)
        self._members = weakref.WeakSet()
        event, self._last_event = self._last_event, None
        if event is not None:
            errors.run(event.synchronize)
        self._arena.close()
        self._closed = True
        if raise_errors:
            errors.raise_first()

    def __enter__(self) -> CudaGraphPool:
        self._require_open()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._close(raise_errors=exc_type is None)  # never masks the exception that ends the block

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._members)} programs, scratch={self.scratch_reserved_bytes} bytes"
        return f"<CudaGraphPool {self._device} {state}>"
