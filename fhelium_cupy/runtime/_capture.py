"""The three construction stages of a CUDA Graph program: warmup, capture, first replay.

Each stage is a function that either succeeds or leaves nothing behind on the device
side: the capture stream is never left capturing, a partial graph is dropped, fresh
warmup buffers are closed. The caller (``CudaGraphProgram.capture``) wraps failures in
``CudaGraphCaptureError`` with the stage name and releases the program's own resources.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CudaGraphCaptureError, CudaGraphOutputError
from ..interop.arrays import leaf_device
from ..interop.capabilities import loaded_torch, require_cupy
from ..interop.devices import Device
from ..interop.streams import resolve_stream
from . import retention
from ._output import OutputLeafError, OutputPlan, OutputSpec, allocate_retained, describe_output
from .arena import GraphArena
from .buffer import MEMCPY_DEFAULT, ReusableValueBuffer
from .memory import memory_snapshot
from .pool import CudaGraphPool
from .signature import ValueTreeSignature

__all__ = [
    "CaptureParts",
    "capture_parts",
    "release_parts",
    "check_arguments",
    "end_capture_quietly",
    "example_device",
    "function_name",
    "run_capture",
    "run_first_replay",
    "run_warmup",
]



def check_arguments(
    function: object, warmup: object, check_input_liveness: object, pool: object, example_inputs: object
) -> None:
    """Argument checks of ``capture`` that need no device (``function=None`` is the decorator form).

    Raises:
        TypeError: non-callable ``function``; ``example_inputs`` not a sequence (a bare
            array would be split into its rows); ``warmup`` not an int (bools rejected);
            ``check_input_liveness`` not a bool; ``pool`` not a ``CudaGraphPool``.
        ValueError: negative ``warmup``; a pool with ``warmup < 1``.
        ExecutionError: the pool is closed.
    """
    if function is not None and not callable(function):
        raise TypeError("function must be callable")
    if not isinstance(example_inputs, Sequence) or isinstance(example_inputs, (str, bytes)):
        raise TypeError(
            f"example_inputs must be a sequence (tuple) of the positional arguments, e.g. (x,) for one array; "
            f"got {type(example_inputs).__name__}"
        )
    if isinstance(warmup, bool) or not isinstance(warmup, (int, np.integer)):
        raise TypeError(f"warmup must be an int, got {type(warmup).__name__}")
    if warmup < 0:
        raise ValueError("warmup must be non-negative")
    if not isinstance(check_input_liveness, bool):
        raise TypeError(f"check_input_liveness must be a bool, got {type(check_input_liveness).__name__}")
    if pool is not None:
        if not isinstance(pool, CudaGraphPool):
            raise TypeError(f"pool must be a CudaGraphPool, got {type(pool).__name__}")
        if warmup < 1:
            raise ValueError("a CudaGraphPool capture needs warmup >= 1 to allocate retained outputs outside the pool")
        pool._require_open()


def example_device(signature: ValueTreeSignature, inputs: tuple[Any, ...]) -> Device:
    """The one CUDA device of every example leaf.

    Raises:
        ValueError: no array leaf, or leaves on the host or on several devices.
        CudaUnavailableError: CuPy or a GPU is missing (checked after the leaves exist, so a
            caller's mistake is named first, and before "move them to a GPU" is advised).
    """
    leaves: list[Any] = []
    signature.collect_leaves(inputs, "example_inputs", leaves)
    if not leaves:
        raise ValueError("CUDA Graph capture requires at least one tensor in example_inputs")
    require_cupy("CUDA Graph capture")
    devices = sorted({str(leaf_device(leaf)) for leaf in leaves})
    device = leaf_device(leaves[0])
    if len(devices) != 1 or device.type != "cuda":
        raise ValueError(
            f"CUDA Graph example inputs must target one CUDA device; got devices={devices}; "
            "move every example to one GPU first (cupy.asarray, tensor.cuda(), value.to('cuda'))"
        )
    return device


def function_name(function: object) -> str:
    """Qualified name of a callable, without ever calling ``repr`` (FHElium bug 7.3).

    ``functools.partial`` objects are unwrapped to the function they bind; a callable
    object is named by its class.
    """
    inner = function
    while isinstance(inner, functools.partial):
        inner = inner.func
    name = getattr(inner, "__qualname__", None)
    if isinstance(name, str):
        return name
    return type(inner).__qualname__


@contextlib.contextmanager
def torch_stream(stream: Any, device: Device) -> Iterator[None]:
    """Make ``stream`` torch's current stream too, when torch with CUDA is loaded.

    A captured callable that moves arrays between CuPy and torch through DLPack then
    exchanges them on one stream (no cross-stream event, which a capture would reject),
    and torch kernels it launches are recorded into the graph. torch *allocations*
    inside a capture come from torch's caching allocator, which is not capture-aware
    for CuPy captures: captured callables should allocate through CuPy.
    """
    torch = loaded_torch()
    if torch is None or not torch.cuda.is_available():
        yield
        return
    external = torch.cuda.ExternalStream(stream.ptr, device=torch.device("cuda", device.index))
    with torch.cuda.stream(external):
        yield


def end_capture_quietly(stream: Any) -> None:
    """End a capture on ``stream`` if one is active or invalidated, discarding the graph."""
    try:
        capturing = bool(stream.is_capturing())
    except Exception:  # an invalidated capture reports an error here; it must still be ended
        capturing = True
    if capturing:
        try:
            stream.end_capture()  # the partial graph (if any) is dropped right away
        except Exception:  # cudaErrorStreamCaptureInvalidated: the capture is ended anyway
            pass


def run_warmup(function: Callable[..., Any], inputs: tuple[Any, ...], device: Device, iterations: int) -> tuple[float, OutputSpec | None]:
    """Call ``function`` ``iterations`` times on a side stream, each time on fresh storage.

    Fresh buffers (new copies of the examples, never the retained input buffer) let
    kernels compile and load, tables materialize and pools grow without touching the
    addresses the graph will capture. Allocations use the normal CuPy allocator.

    Returns:
        ``(seconds, spec)``: host time of the whole stage and the topology of the last
        output (``None`` when ``iterations == 0``).
    """
    cupy = require_cupy("CUDA Graph warmup")
    start = time.perf_counter()
    caller = resolve_stream(None, device)
    side = cupy.cuda.Stream(non_blocking=True)
    side.wait_event(caller.record())  # the examples may still be produced on the caller's stream
    spec: OutputSpec | None = None
    try:
        with side, torch_stream(side, device):
            for _ in range(iterations):
                fresh = ReusableValueBuffer.like(inputs, device=device)
                try:
                    out = function(*fresh.value)
                    spec = describe_output(out, device)
                    del out
                    side.synchronize()
                except BaseException:
                    # what the callable launched before it failed finishes before the stage
                    # ends and before its fresh inputs are freed: nothing is left running
                    _synchronize_quietly(side)
                    raise
                finally:
                    fresh.close()
        # the caller's stream orders after the warmup; no device-wide wait, which would
        # invalidate a capture running in another thread (another worker's program)
        caller.wait_event(side.record())
    finally:
        # CuPy caches freed blocks per stream and never returns those of a stream that is
        # gone: the warmup's temporaries would stay reserved for no one
        cupy.get_default_memory_pool().free_all_blocks(stream=side)
    return time.perf_counter() - start, spec


def _synchronize_quietly(stream: Any) -> None:
    """``stream.synchronize()`` on an error path: a second error must not hide the first."""
    try:
        stream.synchronize()
    except Exception:  # a sticky CUDA error: the original exception says more
        pass


def run_capture(
    function: Callable[..., Any],
    static_inputs: Sequence[Any],
    device: Device,
    arena: GraphArena,
    retained: tuple[OutputSpec, list[Any]] | None,
) -> tuple[Any, OutputPlan, float]:
    """Record ``function(*static_inputs)`` into a CUDA Graph, allocations routed to ``arena``.

    With ``retained = (spec, storage)`` (pool programs), the captured output is checked
    against ``spec`` and copied into ``storage`` by device copies appended to the graph,
    so the output's scratch arrays can be shared with other programs.

    Returns:
        ``(graph, output plan, seconds)``.
    """
    cupy = require_cupy("CUDA Graph capture")
    runtime = cupy.cuda.runtime
    start = time.perf_counter()
    stream = cupy.cuda.Stream(non_blocking=True)  # private and non-default: never capture the legacy stream
    arena.merge_streams()  # blocks freed since the last capture: free for any of this capture's streams
    try:
        with stream, torch_stream(stream, device), cupy.cuda.using_allocator(arena.malloc):
            # Relaxed mode: the arena may need a new chunk (cudaMalloc) in the middle of a
            # capture, which the global and thread-local modes forbid. Relaxed mode still
            # rejects what conflicts with capture (synchronization, event queries), and
            # CuPy itself refuses host transfers and host syncs while capturing.
            stream.begin_capture(mode=runtime.streamCaptureModeRelaxed)
            out = function(*static_inputs)
            if retained is None:
                plan = OutputPlan.from_output(out, device)
            else:
                plan, copies = OutputPlan.retained(retained[0], retained[1], out, device)
                for dst, src, nbytes in copies:
                    runtime.memcpyAsync(dst, src, nbytes, MEMCPY_DEFAULT, stream.ptr)
            del out
            graph = stream.end_capture()
    except BaseException:
        end_capture_quietly(stream)
        raise
    finally:
        arena.merge_streams()  # every branch has joined (or the capture is gone)
    return graph, plan, time.perf_counter() - start


def launch_first(graph: Any, stream: Any) -> None:
    """The first native launch (a separate function so tests can inject a launch failure)."""
    graph.launch(stream)


def run_first_replay(graph: Any, device: Device, pool: CudaGraphPool | None) -> float:
    """Launch ``graph`` once on a private stream and wait for it; returns the host seconds
    from the launch to its completion (the work it is ordered after is waited for first).

    The launch is ordered after the caller's current stream (the input buffer's initial
    copy, the warmup, the retained outputs' allocation) and, in a pool, after the
    newest replay of any member (they share scratch). Only that private stream is
    waited for: a device-wide synchronization would invalidate a capture running in
    another thread (``cudaErrorStreamCaptureUnsupported``, measured on the H200).
    """
    cupy = require_cupy("CUDA Graph replay")
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.wait_event(resolve_stream(None, device).record())
    chain = None if pool is None else pool._chain_event()
    if chain is not None:
        stream.wait_event(chain)
    stream.synchronize()  # the work it waits for (an input copy still in flight) is not the replay's time
    start = time.perf_counter()
    launch_first(graph, stream)
    stream.synchronize()
    return time.perf_counter() - start


@dataclass
class CaptureParts:
    """Everything a successful capture produced, handed to the program constructor."""

    device: Device
    kept_alive: list[Any]  # what retention.retain_for_capture received during the capture
    buffer: ReusableValueBuffer
    static_inputs: tuple[Any, ...]
    arena: GraphArena | None
    graph: Any
    output: OutputPlan
    warmup_seconds: float
    capture_seconds: float
    first_replay_seconds: float
    allocated_bytes: int
    reserved_bytes: int

    def device_context(self) -> Any:
        cupy = require_cupy("CUDA Graph capture")
        return cupy.cuda.Device(self.device.index)


def release_parts(parts: CaptureParts) -> None:
    """Close what ``capture_parts`` handed over when the program cannot be built from it."""
    _release(parts.buffer, parts.arena)


def _release(buffer: ReusableValueBuffer, arena: GraphArena | None) -> None:
    """Close a capture's retained input buffer and the program's own arena (none in a pool)."""
    buffer.close()
    if arena is not None:
        arena.close()


def capture_parts(function: Callable[..., Any], inputs: tuple[Any, ...], warmup: int, pool: CudaGraphPool | None) -> CaptureParts:
    """Run the whole construction: checks, retained buffer, warmup, capture, first replay.

    Argument errors (``TypeError``/``ValueError``) surface unwrapped before any device
    work beyond the retained buffer; a stage failure closes the buffer, releases the
    program's own arena and raises ``CudaGraphCaptureError`` from the original error.
    """
    signature = ValueTreeSignature.from_value(inputs)  # TypeError for unsupported leaves
    device = example_device(signature, inputs)  # CudaUnavailableError without CuPy or a GPU
    if pool is not None and pool.device != device:
        raise ValueError(f"CudaGraphPool is on {pool.device} but the example inputs are on {device}")
    cupy = require_cupy("CUDA Graph capture")
    with cupy.cuda.Device(device.index):
        buffer: ReusableValueBuffer = ReusableValueBuffer.like(inputs, device=device)  # aliasing -> ValueError
        static_inputs = buffer.value  # passed at capture and kept for the program's lifetime
        arena = GraphArena(device) if pool is None else None
        stage = "warmup"
        try:
            warmup_seconds, spec = run_warmup(function, inputs, device, warmup)
            del inputs  # the examples are not needed any more (FHElium bug 7.4)
            retained = None
            if pool is not None:
                assert spec is not None  # check_arguments requires warmup >= 1 with a pool
                retained = (spec, allocate_retained(spec, device))
            stage = "capture"
            with retention.collecting() as kept_alive:  # cached tables the graph reads by address
                graph, output, capture_seconds = run_capture(
                    function, static_inputs, device, arena if arena is not None else pool._arena, retained  # type: ignore[union-attr]
                )
            stage = "first replay"
            first_seconds = run_first_replay(graph, device, pool)
            buffer._prune()  # the initial copy completed: drop the references to the examples
            # The spec's stats: process allocator snapshots after capture (CuPy's default pool on
            # the device plus every open graph arena on it), not this program's own footprint.
            snapshot = memory_snapshot(device)
        except BaseException as error:
            # the error's traceback keeps this frame: what its locals reference (the inputs'
            # storage, the captured output's arena memory, a pool's retained outputs) must not
            # stay held while the caller keeps the exception
            graph = output = retained = kept_alive = static_inputs = None  # type: ignore[assignment]
            _release(buffer, arena)
            if not isinstance(error, Exception):
                raise  # KeyboardInterrupt, SystemExit: cleaned up, passed on as they are
            error_type = CudaGraphOutputError if isinstance(error, OutputLeafError) else CudaGraphCaptureError
            raise error_type(stage=stage, function_name=function_name(function), detail=str(error)) from error
    return CaptureParts(
        device=device,
        kept_alive=kept_alive,
        buffer=buffer,
        static_inputs=static_inputs,
        arena=arena,
        graph=graph,
        output=output,
        warmup_seconds=warmup_seconds,
        capture_seconds=capture_seconds,
        first_replay_seconds=first_seconds,
        allocated_bytes=snapshot.allocated_bytes,
        reserved_bytes=snapshot.reserved_bytes,
    )
