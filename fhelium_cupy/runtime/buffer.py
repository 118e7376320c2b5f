"""Reusable fixed-address buffers for execution values, and the copy handles that feed them.

A :class:`ReusableValueBuffer` owns storage shaped exactly like an example tree (same
strides, same dtypes, same value metadata). ``copy_from`` replaces the payload bytes;
the addresses never change, which is what lets a captured CUDA Graph read new inputs on
every replay. Each copy returns a :class:`~fhelium_cupy.runtime.copy_handle.CopyHandle`
(re-exported here): its CUDA event says when the bytes have landed, and it keeps the
submitted sources alive until then.
"""

from __future__ import annotations

import collections
import ctypes
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from ..errors import ExecutionError, ExecutionInputError
from ..interop.arrays import (
    bump_autograd_versions,
    data_pointer,
    element_strides,
    leaf_device,
    leaf_dtype,
    leaf_kind,
    leaf_span,
    low_offset_bytes,
    span_nbytes,
    storage_dtype,
    wrap_like,
)
from ..interop.capabilities import cupy_or_none, require_cupy
from ..interop.devices import CPU, Device, as_device, is_unindexed_cuda
from ..interop.streams import event_handles, is_event_sequence, resolve_stream, stream_identity
from .copy_handle import CopyHandle
from .signature import TensorSignature, ValueTreeSignature

__all__ = ["CopyHandle", "ReusableValueBuffer", "pin_value_tree", "value_tree_nbytes"]

_ValueT = TypeVar("_ValueT")
MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: direction inferred through unified addressing (runtime-wide)


# ---------------------------------------------------------------------------------------
# storage


class StorageLayout:
    """Where a signature's elements sit in one allocation of their own: the storage dtype
    (``storage_dtype``), byte strides, the bytes from the lowest element to element 0, and
    the span. ``OutputPlan.clone`` keeps one per output leaf, so its allocation on every
    ``copy_output=True`` replay skips the derivation."""

    __slots__ = ("byte_strides", "dtype", "low_offset", "shape", "span")

    def __init__(self, sig: TensorSignature) -> None:
        self.dtype = storage_dtype(sig.dtype)
        itemsize = self.dtype.itemsize
        self.shape = sig.shape
        self.span = span_nbytes(sig.shape, sig.stride, itemsize)
        self.low_offset = low_offset_bytes(sig.shape, sig.stride, itemsize)
        self.byte_strides = tuple(s * itemsize for s in sig.stride)

    def host_array(self, pinned: bool = False) -> np.ndarray:
        """Fresh host storage (pageable, or CuPy pinned memory)."""
        size = max(self.span, 1)
        if pinned:
            cupy = require_cupy("pinned host memory")
            raw = np.frombuffer(cupy.cuda.alloc_pinned_memory(size), dtype=np.uint8, count=size)
        else:
            raw = np.empty(size, dtype=np.uint8)
        return np.ndarray(self.shape, self.dtype, buffer=raw, offset=self.low_offset, strides=self.byte_strides)

    def device_array(self, cupy: Any) -> Any:
        """Fresh storage on the current CUDA device, from the current CuPy allocator (the
        caller picks device and allocator); its lowest byte is at ``data.ptr - low_offset``."""
        mem = cupy.cuda.alloc(max(self.span, 1))
        return cupy.ndarray(self.shape, self.dtype, memptr=mem + self.low_offset, strides=self.byte_strides)


def allocate_storage(sig: TensorSignature, device: Device, pinned: bool = False, *,
                     layout: StorageLayout | None = None) -> Any:
    """Storage with exactly ``sig``'s shape and strides on ``device`` (NumPy or CuPy array;
    a torch-only dtype's tag is stored as its unsigned integers, ``storage_dtype``).
    ``layout``: ``StorageLayout(sig)`` when the caller holds it.

    Raises:
        TypeError: a dtype not in the machine's byte order (``>f8`` on x86) for a CUDA device:
            CuPy would keep it on storage it is handed, and every kernel would misread it.
    """
    layout = layout or StorageLayout(sig)
    if device.type == "cpu":
        return layout.host_array(pinned)
    if not layout.dtype.isnative:  # CuPy keeps the dtype of storage it is handed; its kernels do not
        raise TypeError(
            f"dtype {layout.dtype} is not in this machine's byte order: CUDA code would read its bytes as "
            f"{layout.dtype.newbyteorder('=')}; convert the example first (x.astype(x.dtype.newbyteorder('=')))"
        )
    cupy = require_cupy("a CUDA buffer")
    with cupy.cuda.Device(device.index):
        return layout.device_array(cupy)


def _target_kind(example_leaf: Any, device: Device) -> str:
    if leaf_kind(example_leaf) == "torch":
        return "torch"
    return "numpy" if device.type == "cpu" else "cupy"


class _Plan:
    """Flat copy plan: one entry per array leaf, in flattened order."""

    __slots__ = ("kinds", "low_offsets", "spans", "storages", "targets", "target_lows")

    def __init__(self) -> None:
        self.storages: list[Any] = []  # NumPy/CuPy arrays we own
        self.targets: list[Any] = []  # the leaves handed out (torch views where the example was torch)
        self.target_lows: list[int] = []  # lowest byte address of each target
        self.low_offsets: list[int] = []  # bytes from the lowest element to element 0 (same for matching sources)
        self.spans: list[int] = []
        self.kinds: list[str] = []


def _iter_example_leaves(signature: ValueTreeSignature, example: object) -> list[Any]:
    leaves: list[Any] = []
    signature.collect_leaves(example, "example", leaves)
    return leaves


def _check_aliasing(leaves: Sequence[Any]) -> None:
    """Reject example trees whose arrays share an element in memory.

    Disjoint views are fine, interleaved ones included (``m[:, :4]`` and ``m[:, 4:]``, the
    batch entries of one ciphertext): leaves whose byte ranges overlap are tested element
    by element on their address lattices (``numpy.shares_memory`` over address-only views,
    which never read memory); a test too large to finish counts as shared.
    """
    ranges = []
    for leaf in leaves:
        low, span = leaf_span(leaf)
        if span:
            ranges.append((str(leaf_device(leaf)), low, low + span, leaf))
    ranges.sort(key=lambda r: r[:3])
    for i, (dev_a, _, end_a, leaf_a) in enumerate(ranges):
        for dev_b, start_b, _, leaf_b in ranges[i + 1:]:
            if dev_b != dev_a or start_b >= end_a:
                break
            if _share_elements(leaf_a, leaf_b):
                raise ValueError(
                    "Aliased representative storage is not supported by ReusableValueBuffer; pass independent "
                    "values or keep the shared object outside the reusable payload"
                )


class _AddressOnly:
    """An ``__array_interface__`` over a leaf's addresses: NumPy computes with the pointer and
    strides (``shares_memory``) but this view is never read."""

    __slots__ = ("__array_interface__",)

    def __init__(self, leaf: Any) -> None:
        itemsize = leaf_dtype(leaf).itemsize
        self.__array_interface__ = {
            "data": (data_pointer(leaf), True),
            "shape": tuple(int(n) for n in leaf.shape),
            "strides": tuple(s * itemsize for s in element_strides(leaf)),
            "typestr": f"|V{itemsize}",
            "version": 3,
        }


def _share_elements(a: Any, b: Any) -> bool:
    try:
        # a positive max_work bounds the search (documented; the stubs list only -1 and 0)
        return bool(np.shares_memory(np.asarray(_AddressOnly(a)), np.asarray(_AddressOnly(b)), max_work=1 << 20))  # type: ignore[arg-type]
    except np.exceptions.TooHardError:
        return True  # undecided: refuse, as before


def _copy_host_leaf(dst_low: int, source: Any, n: int) -> None:
    """Synchronous copy of ``n`` span bytes into host memory at ``dst_low``."""
    if n == 0:
        return
    src_low, _ = leaf_span(source)
    dev = leaf_device(source)
    if dev.type == "cpu":
        ctypes.memmove(dst_low, src_low, n)
        return
    cupy = require_cupy("copying a CUDA array to the host")
    with cupy.cuda.Device(dev.index):
        # order after the source's producer: the caller's current stream, a non-default
        # torch stream included (resolve_stream), as for every other copy here
        resolve_stream(None, dev).synchronize()
        cupy.cuda.runtime.memcpy(dst_low, src_low, n, MEMCPY_DEFAULT)


def _wait_for_copies(inflight: collections.deque) -> None:
    """Wait for every unfinished copy into a buffer's storage and forget them."""
    for handle in inflight:
        handle.synchronize()
    inflight.clear()


class ReusableValueBuffer(Generic[_ValueT]):
    """Fixed-structure, fixed-address storage whose payload is replaced by ``copy_from``.

    ``value`` rebuilds ordinary containers, arrays and value objects around the owned
    storage, so eager evaluators consume it directly. Array leaves keep their framework:
    a torch example gives torch tensors (zero-copy views), NumPy/CuPy examples give
    NumPy arrays on a CPU target and CuPy arrays on a CUDA target.

    Ownership: the buffer owns its storage until ``close()``; objects returned by
    ``value`` view it and must not be used after close. Readiness of the payload is
    governed by copy handles and stream order, not by ``value`` access.

    Direct construction is not public: use :meth:`like`.
    """

    def __init__(self, *, signature: ValueTreeSignature, device: Device, pinned: bool, plan: _Plan, templates: list[Any],
                 key_orders: tuple[tuple[object, ...] | None, ...] | None = None) -> None:
        self._signature = signature
        self._device = device
        self._pinned = pinned
        self._plan = plan
        self._templates = templates
        # the example's key order of each dict (preorder; None for a dict in the signature's order,
        # and the whole tuple None when every one is): the signature sorts keys, but a callable
        # iterating its dict input must see the order it sees eagerly
        self._key_orders = key_orders
        self._nbytes = signature.nbytes
        # (leaf index, target low address, low offset, span bytes) of every non-empty leaf;
        # issued by _enqueue_copies (also for CudaGraphProgram's replay).
        self._copy_plan = tuple(
            (i, low, offset, span)
            for i, (low, offset, span) in enumerate(zip(plan.target_lows, plan.low_offsets, plan.spans))
            if span
        )
        # [lowest, highest) address of the storage, for the cheap first test of _check_disjoint
        self._bounds = (min((c[1] for c in self._copy_plan), default=0),
                        max((c[1] + c[3] for c in self._copy_plan), default=0))
        # torch views of the storage: every payload copy bumps their autograd version, as
        # torch's own copy_ would (a graph that saved the old values then refuses backward
        # instead of silently using the new ones)
        self._torch_targets = tuple(t for t, kind in zip(plan.targets, plan.kinds) if kind == "torch")
        self._token = object()
        # Unfinished copies, oldest first. They form a chain (each copy waits for the
        # newest unfinished one), so a completed copy implies all older ones completed.
        self._inflight: collections.deque[CopyHandle] = collections.deque()
        self._closed = False
        # Safety net for a buffer dropped without close(): its storage is freed only after the
        # copies still writing it completed (the deque does not reference the buffer). Not at
        # interpreter exit: the process's memory goes away with it.
        self._finalizer = weakref.finalize(self, _wait_for_copies, self._inflight)
        self._finalizer.atexit = False

    # -- construction -------------------------------------------------------------------

    @classmethod
    def like(cls, example: _ValueT, *, device: object | None = None, pin_memory: bool = False) -> ReusableValueBuffer[_ValueT]:
        """Allocate a buffer shaped like ``example`` and copy ``example`` into it.

        Args:
            example: array/value tree (lists, tuples, dicts nest) defining the signature.
            device: target device; ``None`` takes the single device of every example
                leaf. ``"cuda"`` resolves to the current CUDA device.
            pin_memory: allocate page-locked host storage (CPU target only), suitable for
                asynchronous host-to-device copies.

        Raises:
            TypeError: unsupported leaf or container (the message names the path).
            ValueError: no array leaves; examples span several devices without an
                indexed ``device`` (``"cuda"`` alone is ambiguous there); ``pin_memory`` with a non-CPU target; overlapping leaves.
            CudaUnavailableError: a CUDA target or pinned memory without CuPy/GPU.
        """
        signature = ValueTreeSignature.from_value(example)
        leaf_sigs = signature.leaf_signatures()
        if not leaf_sigs:
            raise ValueError(
                "ReusableValueBuffer requires at least one tensor; pass an example with at least one array leaf "
                "and bind scalars and control objects statically"
            )
        leaves = _iter_example_leaves(signature, example)
        devices = sorted({str(leaf_device(leaf)) for leaf in leaves})
        if len(devices) != 1 and (device is None or is_unindexed_cuda(device)):
            raise ValueError(
                "ReusableValueBuffer requires an indexed target device when example tensors span multiple "
                f"devices: devices={devices}; pass device='cpu' or device='cuda:N'"
            )
        target = leaf_device(leaves[0]) if device is None else as_device(device)
        if pin_memory and target.type != "cpu":
            raise ValueError(f"pin_memory=True requires a CPU target device, got {target}; pass device='cpu' or drop pin_memory")
        if target.type == "cuda" or pin_memory:
            require_cupy("pinned host memory" if pin_memory else f"a buffer on {target}")
        _check_aliasing(leaves)

        plan = _Plan()
        for leaf, sig in zip(leaves, leaf_sigs):
            layout = StorageLayout(sig)
            storage = allocate_storage(sig, target, pin_memory, layout=layout)
            kind = _target_kind(leaf, target)
            plan.storages.append(storage)
            plan.targets.append(wrap_like(storage, kind, requires_grad=sig.requires_grad, dtype=sig.dtype))  # type: ignore[arg-type]
            plan.target_lows.append(data_pointer(storage) - layout.low_offset)
            plan.low_offsets.append(layout.low_offset)
            plan.spans.append(layout.span)
            plan.kinds.append(kind)
        templates, key_orders = _value_templates(signature, example, iter(plan.targets))
        buffer: ReusableValueBuffer[_ValueT] = cls(signature=signature, device=target, pinned=pin_memory, plan=plan,
                                                   templates=templates, key_orders=key_orders)
        if target.type == "cpu":
            for low, span, leaf in zip(plan.target_lows, plan.spans, leaves):
                _copy_host_leaf(low, leaf, span)
        else:
            stream = resolve_stream(None, target)
            buffer._inflight.append(buffer._submit(leaves, stream, (), non_blocking=True))
        return buffer

    # -- properties ---------------------------------------------------------------------

    @property
    def signature(self) -> ValueTreeSignature:
        """Signature every source must match (available after close)."""
        return self._signature

    @property
    def device(self) -> Device:
        """Target residency (available after close): a ``Device``, the string ``"cpu"`` or
        ``"cuda:N"``, equal to the ``torch.device`` and accepted by torch."""
        return self._device

    @property
    def is_pinned(self) -> bool:
        """Whether the host storage was allocated page-locked."""
        return self._pinned

    @property
    def nbytes(self) -> int:
        """Logical bytes of the payload (sum of elements times item size)."""
        return self._nbytes

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def value(self) -> _ValueT:
        """A fresh tree of containers and value wrappers around the fixed storage.

        Arrays are the same objects on every access (stable addresses); value wrappers
        and containers are new each time, so mutating one cannot corrupt the buffer.
        """
        self._require_open()
        orders = None if self._key_orders is None else iter(self._key_orders)
        return _rebuild(self._signature, iter(self._plan.targets), iter(self._templates), orders)  # type: ignore[return-value]

    def copy_plan(self) -> tuple[tuple[int, int, int, int], ...]:
        """The flat copy plan: ``(leaf index, target low address, low offset, span bytes)``.

        One entry per non-empty array leaf in flattened order. A validated source has the
        target's strides, so its lowest address is its element-0 pointer minus the same
        low offset: a copy is one ``cudaMemcpyAsync`` of ``span`` bytes per entry.
        """
        self._require_open()
        return self._copy_plan

    def storage_arrays(self) -> tuple[Any, ...]:
        """The owned NumPy/CuPy arrays in flattened leaf order (for address checks)."""
        self._require_open()
        return tuple(self._plan.storages)

    # -- copies -------------------------------------------------------------------------

    def copy_from(
        self,
        source: _ValueT,
        *,
        stream: object | None = None,
        non_blocking: bool = True,
        wait_for: object | Sequence[object] | None = None,
    ) -> CopyHandle:
        """Validate the whole ``source`` tree, then copy its payload into the fixed storage.

        Ownership: addresses never change; the returned handle retains ``source``'s
        arrays until its event completes.
        Stream: a CUDA target copies on ``stream`` (default: the caller's current stream
        of the target device) after waiting for ``wait_for`` events and for earlier
        unfinished copies into this buffer (write-after-write). It does not wait for the
        stream that produced a CUDA source, nor for earlier *readers* of the payload:
        pass their events in ``wait_for``. Pinned host sources give true asynchronous
        H2D; pageable ones are staged by the driver. A CPU target copies synchronously.

        Raises:
            ExecutionError: the buffer is closed.
            ExecutionInputError: ``source`` differs in structure, array topology or value
                metadata, or a leaf of it shares memory with this buffer's storage other than
                exactly its own target (nothing was written).
            ValueError: ``stream`` belongs to another device; a stream or events passed
                to a CPU-target buffer.
            TypeError: ``stream`` is not a CUDA stream, or ``wait_for`` holds an object
                that is not a CUDA event.
        """
        self._require_open()
        leaves: list[Any] = []
        self._signature.collect_leaves(source, "source", leaves)
        starts = self._check_disjoint(leaves)
        if self._device.type == "cpu":
            if stream is not None:
                raise ValueError("CPU ReusableValueBuffer does not accept a CUDA stream; omit stream= (CPU copies are synchronous)")
            if wait_for is not None and (not is_event_sequence(wait_for) or len(wait_for)):  # type: ignore[arg-type]
                raise ValueError(
                    "CPU ReusableValueBuffer does not accept CUDA events; synchronize the producer first and omit wait_for="
                )
            for low, span, leaf in zip(self._plan.target_lows, self._plan.spans, leaves):
                _copy_host_leaf(low, leaf, span)
            if self._torch_targets:
                bump_autograd_versions(self._torch_targets)
            return CopyHandle(event=None, device=self._device, sources=(), bytes_copied=self._nbytes, token=self._token)
        copy_stream = resolve_stream(stream, self._device)
        waits = event_handles(wait_for)
        return self._copy_validated(leaves, copy_stream, waits, non_blocking=non_blocking, starts=starts)

    def _check_disjoint(self, leaves: Sequence[Any]) -> list[int]:
        """ExecutionInputError when a validated source leaf shares memory with this buffer's
        storage other than exactly its own target (a view of ``value``): the copies run leaf by
        leaf, so one would overwrite what a later one still reads (a swap of two leaves copied
        one into both). A leaf that is exactly its own target is a no-op copy and passes. Two
        comparisons a leaf when the source lies outside the storage (the usual case). Callers:
        ``copy_from``, ``CudaGraphProgram.copy_inputs_from`` and ``CudaGraphProgram.replay``, before
        anything is written. Returns each copy's source address (copy-plan order), which
        ``_enqueue_copies`` takes instead of reading every leaf's pointer again."""
        lo, hi = self._bounds
        starts = []
        for i, _, offset, span in self._copy_plan:  # (empty leaves touch no memory)
            start = data_pointer(leaves[i]) - offset
            starts.append(start)
            if start + span <= lo or start >= hi:
                continue
            for j, t_low, _, t_span in self._copy_plan:
                if start < t_low + t_span and t_low < start + span and not (i == j and start == t_low):
                    raise ExecutionInputError(
                        f"source leaf {i} shares memory with leaf {j} of this buffer's storage: copied leaf by "
                        "leaf, one would overwrite what another still reads; pass a copy (x.copy())"
                    )
        return starts

    def _copy_validated(self, leaves: list[Any], stream: Any, waits: tuple[int, ...], *, non_blocking: bool,
                        starts: list[int]) -> CopyHandle:
        """Copy already-validated leaves (CUDA target; ``starts`` from ``_check_disjoint``) after
        ordering behind in-flight copies."""
        self._prune()
        if self._inflight:
            waits = (self._inflight[-1].event.ptr, *waits)  # the newest covers all older copies
        handle = self._submit(leaves, stream, waits, non_blocking=non_blocking, starts=starts)
        self._inflight.append(handle)
        return handle

    def _submit(self, leaves: Sequence[Any], stream: Any, deps: tuple[int, ...], *, non_blocking: bool,
                starts: list[int] | None = None) -> CopyHandle:
        """Enqueue the copies on ``stream`` after ``deps`` and record their event, all with the
        buffer's device current: the default streams' handles (0, 1, 2) name the current
        device's stream, so from another current device they would order and copy on the
        wrong GPU (an audit found copy_inputs_from of a program on cuda:1 doing that)."""
        cupy = cupy_or_none()
        assert cupy is not None
        runtime = cupy.cuda.runtime
        sptr = stream.ptr
        with cupy.cuda.Device(self._device.index):
            for dep in deps:
                runtime.streamWaitEvent(sptr, dep, 0)
            try:
                self._enqueue_copies(leaves, sptr, runtime.memcpyAsync, starts)
            except BaseException:
                stream.synchronize()  # what was enqueued lands before the error leaves: nothing in flight untracked
                raise
            event = cupy.cuda.Event(block=False, disable_timing=True)
            event.record(stream)
        handle = CopyHandle(event=event, device=self._device, sources=tuple(leaves), bytes_copied=self._nbytes,
                            token=self._token, stream=stream_identity(sptr))
        if not non_blocking:
            handle.synchronize()
        return handle

    def _enqueue_copies(self, leaves: Sequence[Any], stream_ptr: int, memcpy_async: Any,
                        starts: list[int] | None = None) -> None:
        """The copy plan's ``cudaMemcpyAsync`` calls from validated ``leaves`` on ``stream_ptr``
        (CUDA target; no ordering, no event: the caller provides both), from ``starts`` (the
        source addresses ``_check_disjoint`` returned) when given. The one place that issues
        input copies: ``copy_from``, ``copy_inputs_from`` and every ``replay``."""
        if starts is None:
            starts = [data_pointer(leaves[i]) - offset for i, _, offset, _ in self._copy_plan]
        for (_, low, _, span), start in zip(self._copy_plan, starts):
            memcpy_async(low, start, span, MEMCPY_DEFAULT, stream_ptr)
        if self._torch_targets:
            bump_autograd_versions(self._torch_targets)

    def _prune(self) -> None:
        inflight = self._inflight
        while inflight and inflight[0].query():  # the chain: the first unfinished ends the scan
            inflight.popleft()

    def wait_for(self, handle: CopyHandle, stream: object | None = None) -> None:
        """Make ``stream`` wait for ``handle`` (which must come from this buffer); no host block.

        Raises:
            ExecutionError: the buffer is closed.
            ExecutionInputError: ``handle`` belongs to another buffer.
            ValueError: ``stream`` belongs to another device.
        """
        self._require_open()
        if not isinstance(handle, CopyHandle) or not handle._belongs_to(self._token):
            raise ExecutionInputError(
                "CopyHandle belongs to another ReusableValueBuffer; pass a handle returned by this buffer's copy_from"
            )
        handle.wait_on(stream)

    # -- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Wait for in-flight copies, release sources and drop the storage. Idempotent.

        Does not wait for readers of the storage (evaluators, graph replays): order those
        first. Objects previously returned by ``value`` keep the memory alive but must not
        be used. If the wait fails (a CUDA error, such as a sticky one from an earlier kernel),
        the buffer is still released and closed, and that error is raised afterwards, once.
        """
        if self._closed:
            return
        try:
            _wait_for_copies(self._inflight)
        finally:
            self._release()

    def _release(self) -> None:
        self._inflight.clear()
        self._finalizer.detach()
        self._plan = _Plan()
        self._copy_plan = ()
        self._bounds = (0, 0)
        self._torch_targets = ()
        self._templates = []
        self._closed = True

    def _require_open(self) -> None:
        if self._closed:
            raise ExecutionError("ReusableValueBuffer is closed; create a new one with ReusableValueBuffer.like")

    def __enter__(self) -> ReusableValueBuffer[_ValueT]:
        self._require_open()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # never masks the exception that ends the block (as the program and the pool)
            self.close()
        except Exception:  # noqa: BLE001 (released and closed all the same: close() does it first)
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._nbytes} bytes"
        return f"<ReusableValueBuffer device={self._device} {state}>"


# ---------------------------------------------------------------------------------------
# tree rebuilding


def _value_templates(signature: ValueTreeSignature, example: object,
                     targets: Iterator[Any]) -> tuple[list[Any], tuple[tuple[object, ...] | None, ...] | None]:
    """One template per value leaf (the example's value rebuilt around target arrays), and the
    example's dict key orders for ``_rebuild`` (None where every dict is in the signature's
    order), in one walk."""
    out: list[Any] = []
    orders: list[tuple[object, ...] | None] = []
    _collect_templates(signature, example, targets, out, orders)
    return out, (tuple(orders) if any(o is not None for o in orders) else None)


def _collect_templates(sig: ValueTreeSignature, node: object, targets: Iterator[Any], out: list[Any],
                       orders: list[tuple[object, ...] | None]) -> None:
    # a module-level recursion, not a nested one: a closure that calls itself is a reference
    # cycle, and this one held the storage (through ``targets``) until the next gc pass
    if sig.kind == "value":
        names = [name for name, _ in sig.leaf.tensors]  # type: ignore[union-attr]
        arrays = {name: next(targets) for name in names}
        out.append(node.with_value_tensors(arrays))  # type: ignore[attr-defined]
    elif sig.kind == "tensor":
        next(targets)
    elif sig.kind == "dict":
        order: tuple[object, ...] = tuple(node)  # type: ignore[arg-type]
        orders.append(None if order == sig.keys else order)  # preorder, as _rebuild meets them
        for key, child in zip(sig.keys, sig.children):
            _collect_templates(child, node[key], targets, out, orders)  # type: ignore[index]
    else:
        for child, item in zip(sig.children, node):  # type: ignore[call-overload]
            _collect_templates(child, item, targets, out, orders)


def _rebuild(sig: ValueTreeSignature, targets: Iterator[Any], templates: Iterator[Any],
             orders: Iterator[tuple[object, ...] | None] | None = None) -> object:
    """The tree of ``sig`` around ``targets`` (leaf order) and value ``templates``; dicts in
    the key order ``orders`` gives (the example's, preorder; None: the signature's)."""
    kind = sig.kind
    if kind == "tensor":
        return next(targets)
    if kind == "value":
        template = next(templates)
        arrays = {name: next(targets) for name, _ in sig.leaf.tensors}  # type: ignore[union-attr]
        return template.with_value_tensors(arrays)
    if kind == "list":
        return [_rebuild(child, targets, templates, orders) for child in sig.children]
    if kind == "tuple":
        return tuple(_rebuild(child, targets, templates, orders) for child in sig.children)
    order = next(orders) if orders is not None else None
    built = {key: _rebuild(child, targets, templates, orders) for key, child in zip(sig.keys, sig.children)}
    return built if order is None else {key: built[key] for key in order}


def pin_value_tree(value: _ValueT) -> _ValueT:
    """An independent copy of ``value`` in page-locked host memory (same signature).

    Sources may be on CPU or CUDA. Containers come back as plain list/tuple/dict.

    Raises:
        TypeError, ValueError: as :meth:`ReusableValueBuffer.like`.
        CudaUnavailableError: pinned memory needs CuPy and a CUDA driver.
    """
    buffer = ReusableValueBuffer.like(value, device=CPU, pin_memory=True)
    return buffer.value


def value_tree_nbytes(value: object) -> int:
    """Logical bytes of every array in a tree (value leaves count their arrays).

    Raises:
        TypeError: unsupported leaf or container.
    """
    return ValueTreeSignature.from_value(value).nbytes

