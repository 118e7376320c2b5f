"""CUDA Graph capture and replay for fixed-schedule evaluators, on CuPy stream capture.

``CudaGraphProgram.capture`` warms a callable up on fresh storage, records it with
``Stream.begin_capture``/``end_capture`` into a ``cupy.cuda.Graph`` whose allocations
come from a graph-private arena, and returns a program whose ``replay`` validates new
inputs, copies them into fixed addresses and launches the graph on the caller's stream.
"""

from __future__ import annotations

import traceback
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from ..errors import CudaGraphCaptureError, CudaGraphInputError, ExecutionError, ExecutionInputError
from ..interop.arrays import bump_autograd_versions, leaf_kind
from ..interop.capabilities import require_cupy
from ..interop.devices import Device
from ..interop.streams import current_stream_getter, event_handles, resolve_stream, stream_identity
from . import _capture
from ._graph_execs import DriverError, InputCopyGraph, RootedGraph
from ._output import OutputPlan
from ._replay import EventRing
from ._teardown import TeardownErrors
from ._validate import leaf_collector
from .arena import GraphArena
from .buffer import CopyHandle, ReusableValueBuffer
from .pool import CudaGraphPool
from .signature import TensorSignature, ValueSignature, ValueTreeSignature

# The spec's page for this module also lists the pool and the signature classes: re-exported
# from the modules that define them.
__all__ = [
    "CudaGraphCaptureStats",
    "CudaGraphPool",
    "CudaGraphProgram",
    "TensorSignature",
    "ValueSignature",
    "ValueTreeSignature",
]

_OutputT = TypeVar("_OutputT")
_CLOSED = "CUDA Graph program is closed"


@dataclass(frozen=True)
class CudaGraphCaptureStats:
    """One-time construction costs and the process's device memory after capture.

    Attributes:
        warmup_iterations: number of uncaptured warmup evaluations requested.
        warmup_seconds: host time of the whole warmup stage (fresh buffers and syncs included).
        capture_seconds: host time of the capture, output validation and graph instantiation
            (the input-copy executables ``replay()`` uses for device sources, and the rooted
            executable of a graph with several roots, are built after it: about 1 ms for a
            46-kernel graph on the H200).
        first_replay_seconds: host time of the synchronized first graph launch.
        memory_allocated_bytes: CUDA allocator bytes live after capture, process-wide on
            the capture device (the spec's snapshot, not a per-graph footprint): CuPy's
            default pool in use plus every open graph arena's blocks in use
            (``runtime.memory.memory_snapshot().allocated_bytes``).
        memory_reserved_bytes: CUDA allocator bytes reserved after capture, likewise
            process-wide: CuPy's default pool held plus every open graph arena's chunks
            (``memory_snapshot().reserved_bytes``). A program's own graph memory is its
            arena (``CudaGraphPool.scratch_reserved_bytes`` for pool members).
    """

    warmup_iterations: int
    warmup_seconds: float
    capture_seconds: float
    first_replay_seconds: float
    memory_allocated_bytes: int
    memory_reserved_bytes: int


class CudaGraphProgram(Generic[_OutputT]):
    """CUDA Graph adapter for an eager callable with reusable dynamic inputs.

    The original callable stays valid for eager use. Dynamic positional inputs live in
    one :class:`ReusableValueBuffer`; the graph records its fixed addresses and replay
    changes only the payload. Parameters bound by a closure, ``functools.partial`` or a
    callable object are static program state; the program keeps the callable (and so
    those resources) alive until :meth:`close`.

    Sources may later reside on the host (pageable or pinned NumPy, CPU torch) or on
    CUDA (CuPy, torch) as long as their device-independent signature matches capture.
    Host-to-device overlap needs pinned sources and ``copy_inputs_from`` on a transfer
    stream followed by ``replay_prepared`` on a compute stream.

    Ownership: replay returns a *borrowed* output around the fixed output arrays, which
    the next replay overwrites: lists, dicts and wrappers of mutable value types are
    fresh per replay, tuples and immutable values (``Ciphertext``) are the same objects
    every time. Pass ``copy_output=True`` for independent storage. One program owns one input/output
    storage set and replays sequentially (one host thread); concurrent workers need
    independent programs.

    Memory: captured CuPy allocations come from a graph-private arena (or the pool's shared
    scratch), never from CuPy's default pool, so eager code can allocate and free freely
    (``free_all_blocks()`` included) without ever receiving graph memory. torch
    allocations are not routed: a torch temporary a captured callable allocates and drops
    goes back to torch's caching allocator, which could hand it to an eager tensor that
    every replay then overwrites. Captured callables allocate through CuPy (torch ops on
    views of CuPy arrays through DLPack are fine); a torch tensor *returned* stays the
    program's.

    Construct programs with :meth:`capture`; direct construction is not public.

    Examples::

        program = CudaGraphProgram.capture(schedule, example_inputs=(prototype,))
        borrowed = program.replay(next_source)
        owned = program.replay(next_source, copy_output=True)

        handle = program.copy_inputs_from(pinned_source, stream=transfer_stream)
        with compute_stream:
            output = program.replay_prepared(copy_handle=handle)
    """

    def __init__(
        self,
        *,
        function: Callable[..., _OutputT],
        device: Device,
        graph: Any,
        input_buffer: ReusableValueBuffer[tuple[Any, ...]],
        static_inputs: tuple[Any, ...],
        output: OutputPlan,
        stats: CudaGraphCaptureStats,
        pool: CudaGraphPool | None = None,
        arena: GraphArena | None = None,
        check_input_liveness: bool = True,
        kept_alive: Sequence[Any] = (),
    ) -> None:
        cupy = require_cupy("CudaGraphProgram")
        self._cupy = cupy
        self._runtime = cupy.cuda.runtime
        self._function = function
        self._device = device
        self._device_index = int(device.index)  # type: ignore[arg-type]
        self._graph = graph
        # a graph with several roots (its first work a fork) launches behind one memcpy node of
        # a further executable (None: one root already, or no driver; Graph.launch then)
        self._rooted = RootedGraph.build(graph, launch=self._runtime.graphLaunch)
        self._launch = graph.launch if self._rooted is None else self._rooted.launch
        self._buffer = input_buffer
        self._signature = input_buffer.signature
        self._static_inputs = static_inputs
        self._output = output
        self._stats = stats
        self._pool = pool
        self._arena = arena
        # cached device tables the graph reads by address (runtime.retention): held until close
        self._kept_alive = tuple(kept_alive)
        self._check_input_liveness = check_input_liveness
        self._events = EventRing(cupy, self._device_index)
        self._record = self._events.record
        # everything replay needs, resolved once: the compiled signature check, the
        # caller's-stream lookup, the buffer's copy issuer and the borrowed output
        self._collect = leaf_collector(self._signature, (cupy.ndarray,))
        self._current_stream = current_stream_getter(device)
        self._enqueue_copies = input_buffer._enqueue_copies
        self._memcpy_async = self._runtime.memcpyAsync
        # replay() of device-resident sources: the copies as memcpy nodes ahead of the graph,
        # in executables pointed at recent sources (None: the driver lacks them; cudaMemcpyAsync then)
        self._input_nodes = InputCopyGraph.build(graph, input_buffer._copy_plan, self._device_index,
                                                 launch=self._runtime.graphLaunch)
        self._input_torch_targets = input_buffer._torch_targets
        self._borrow = output.borrow
        # torch output leaves: each launch rewrites them, so their autograd version moves on
        # as a torch in-place op would (the buffer does the same for its input views)
        self._torch_outputs = tuple(leaf for leaf in output.leaves if leaf_kind(leaf) == "torch")
        self._latest_copy: CopyHandle | None = None
        # stream of the newest replay-complete event (self._events.last): stream_identity of its handle
        self._last_stream: object = None
        self._closed = False
        # Safety net for a program dropped without close(): wait for its last replay before
        # its storage can be released (the ring does not reference the program).
        self._finalizer = weakref.finalize(self, self._events.drain)
        if pool is not None:
            pool._register(self)

    # -- capture ------------------------------------------------------------------------

    @overload
    @classmethod
    def capture(
        cls,
        function: Callable[..., _OutputT],
        *,
        example_inputs: Sequence[object],
        warmup: int = 3,
        check_input_liveness: bool = True,
        pool: CudaGraphPool | None = None,
    ) -> CudaGraphProgram[_OutputT]: ...

    @overload
    @classmethod
    def capture(
        cls,
        function: None = None,
        *,
        example_inputs: Sequence[object],
        warmup: int = 3,
        check_input_liveness: bool = True,
        pool: CudaGraphPool | None = None,
    ) -> Callable[[Callable[..., _OutputT]], CudaGraphProgram[_OutputT]]: ...

    @classmethod
    def capture(
        cls,
        function: Callable[..., _OutputT] | None = None,
        *,
        example_inputs: Sequence[object],
        warmup: int = 3,
        check_input_liveness: bool = True,
        pool: CudaGraphPool | None = None,
    ) -> Any:
        """Warm up and capture one deterministic evaluator schedule.

        ``example_inputs`` defines the dynamic positional argument tree and the CUDA
        device. Warmup runs ``function`` ``warmup`` times on a side stream with fresh
        buffers, so compilation and lazy setup never touch the retained addresses. The
        capture runs on a private stream with allocations routed to a graph-private
        arena (the pool's scratch when ``pool`` is given), then the graph is launched
        once, synchronized and timed. Every wait of the construction is on its own
        streams and events, never device-wide, so another thread may capture its own
        program (with its own pool) at the same time.

        Omitting ``function`` returns a decorator that captures at definition time; the
        decorated name is then the ready program, not the function.

        Args:
            function: callable whose Python control flow and CUDA work are fixed. Its
                output must be ``None``, a CuPy array or torch CUDA tensor, a registered
                value, or nested plain lists/tuples/dicts of those (no namedtuple or
                other subclass: outputs are rebuilt as plain containers), on the capture
                device.
            example_inputs: CUDA-resident positional prototypes: a sequence (tuple) of the
                arguments, ``(x,)`` for one array; containers inside are plain too.
            warmup: number of fresh-buffer side-stream evaluations before capture.
            check_input_liveness: accepted for FHElium compatibility (``torch.cuda.graph``
                has this option). Liveness always holds here: the program owns copies of
                its dynamic inputs and keeps the callable, with every resource it binds,
                referenced until ``close()``. Must be a bool.
            pool: optional :class:`CudaGraphPool` whose scratch this program shares;
                needs ``warmup >= 1`` and the same device.

        Returns:
            A ready :class:`CudaGraphProgram`, or a decorator producing one.

        Raises:
            TypeError: ``function`` is not callable, ``example_inputs`` is not a
                sequence, ``warmup``/``check_input_liveness`` have the wrong type, or an input
                leaf or container is unsupported.
            ValueError: negative ``warmup``; no array in the examples; examples not on
                one CUDA device; aliased examples; a pool capture without warmup or on
                another device.
            ExecutionError: ``pool`` is closed.
            CudaUnavailableError: CuPy or a GPU is missing.
            CudaGraphCaptureError: warmup, capture, output validation or the first
                replay failed (``stage`` says which; the original error is the cause).
                An unsupported *output* leaf raises its subclass ``CudaGraphOutputError``,
                which is also a ``TypeError``.
        """
        _capture.check_arguments(function, warmup, check_input_liveness, pool, example_inputs)
        if function is None:

            def decorator(fn: Callable[..., _OutputT]) -> CudaGraphProgram[_OutputT]:
                return cls.capture(
                    fn, example_inputs=example_inputs, warmup=warmup, check_input_liveness=check_input_liveness, pool=pool
                )

            return decorator
        return cls._capture(function, tuple(example_inputs), int(warmup), check_input_liveness, pool)

    @classmethod
    def _capture(
        cls, function: Callable[..., Any], inputs: tuple[Any, ...], warmup: int, check_input_liveness: bool, pool: CudaGraphPool | None
    ) -> CudaGraphProgram[Any]:
        parts = _capture.capture_parts(function, inputs, warmup, pool)
        stats = CudaGraphCaptureStats(
            warmup_iterations=warmup,
            warmup_seconds=parts.warmup_seconds,
            capture_seconds=parts.capture_seconds,
            first_replay_seconds=parts.first_replay_seconds,
            memory_allocated_bytes=parts.allocated_bytes,
            memory_reserved_bytes=parts.reserved_bytes,
        )
        try:
            with parts.device_context():
                return cls(
                    function=function,
                    device=parts.device,
                    graph=parts.graph,
                    input_buffer=parts.buffer,
                    static_inputs=parts.static_inputs,
                    output=parts.output,
                    stats=stats,
                    pool=pool,
                    arena=parts.arena,
                    check_input_liveness=check_input_liveness,
                    kept_alive=parts.kept_alive,
                )
        except BaseException as error:  # (an event the driver would not create): nothing may stay held
            _capture.release_parts(parts)
            # the error's traceback keeps this frame and the half-built program's __init__ frame
            # (its self holds the output and inputs): ours, so their locals can go
            parts = None  # type: ignore[assignment]
            traceback.clear_frames(error.__traceback__)
            if not isinstance(error, Exception):
                raise
            raise CudaGraphCaptureError(stage="first replay", function_name=_capture.function_name(function),
                                        detail=str(error)) from error

    # -- properties ---------------------------------------------------------------------

    @property
    def device(self) -> Device:
        """CUDA device of the capture (available after close): a ``Device``, the string
        ``"cuda:N"`` that torch accepts and that equals ``torch.device("cuda", N)``."""
        return self._device

    @property
    def stats(self) -> CudaGraphCaptureStats:
        """One-time construction timings and post-capture memory (available after close)."""
        return self._stats

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pool(self) -> CudaGraphPool | None:
        """The pool whose scratch this program shares, if any."""
        return self._pool

    @property
    def input_signature(self) -> ValueTreeSignature:
        """Device-independent signature of the positional argument tuple (root kind ``"tuple"``)."""
        self._require_open()
        return self._signature

    @property
    def input_nbytes(self) -> int:
        """Logical bytes of the fixed dynamic-input storage."""
        self._require_open()
        return self._buffer.nbytes

    @property
    def output(self) -> _OutputT:
        """Borrowed output: the tree around the fixed output arrays (see the class notes).

        Its storage is overwritten by the next replay; use ``replay(..., copy_output=True)``
        for independent ownership. If the callable returns one of its inputs unchanged, the
        borrowed output is the input buffer itself, so the next ``copy_inputs_from``
        overwrites it already, before any replay.
        """
        self._require_open()
        return self._output.borrow()  # type: ignore[return-value]

    @property
    def cuda_graph(self) -> Any:
        """The underlying ``cupy.cuda.Graph``.

        Launching it directly bypasses input validation, payload copies, event waits,
        overwrite protection and the pool's event chain; it reuses the payload currently
        in the input buffer, and ``close()`` does not know about such launches. A graph
        whose first work is a fork has several roots and costs about three times the host
        time per direct launch; the program's own replays launch it behind a single root
        (``runtime._graph_execs.RootedGraph``).
        """
        self._require_open()
        return self._graph

    # -- replay -------------------------------------------------------------------------

    def copy_inputs_from(
        self,
        *inputs: object,
        stream: object | None = None,
        non_blocking: bool = True,
        wait_for: object | Sequence[object] | None = None,
    ) -> CopyHandle:
        """Copy matching positional inputs into the fixed input storage without replaying.

        Stream: enqueued on ``stream`` (default: the caller's current stream) after the
        ``wait_for`` events, the previous replay's completion (overwrite protection: the
        graph may still read the old payload) and earlier unfinished copies. It does not
        wait for the producer of a CUDA source on another stream: pass its event.
        Ownership: the handle keeps the sources alive until the copy completed; it
        supersedes any earlier outstanding handle, and so does a copy that fails partway (the
        payload is then part old, part new: copy again before ``replay_prepared``).

        Raises:
            ExecutionError: the program is closed.
            CudaGraphInputError: structure or value state differs from capture, or an input
                shares memory with the program's input storage (nothing written; the
                outstanding handle stays valid).
            ValueError: ``stream`` belongs to another device.
            TypeError: ``stream`` is not a CUDA stream, or ``wait_for`` holds an object
                that is not a CUDA event.
        """
        self._require_open()
        try:
            leaves = self._collect(inputs)
            starts = self._buffer._check_disjoint(leaves)  # here, before the handle is touched (nothing written)
        except ExecutionInputError as error:
            raise CudaGraphInputError(str(error)) from error
        # the buffer enqueues with the program's device current (a default stream's handle is
        # per device); resolving the caller's stream names the device itself
        copy_stream = resolve_stream(stream, self._device)
        waits = event_handles(wait_for)
        last = self._events.last
        if last is not None:
            waits = (*waits, last.ptr)
        try:
            handle = self._buffer._copy_validated(leaves, copy_stream, waits, non_blocking=non_blocking, starts=starts)
        except BaseException:
            # a copy that failed partway (the buffer drained its stream) left the payload part old,
            # part new: no earlier handle describes it any more
            self._latest_copy = None
            raise
        self._latest_copy = handle
        return handle

    def replay_prepared(self, *, copy_handle: CopyHandle | None = None, copy_output: bool = False, synchronize: bool = False) -> _OutputT:
        """Replay the payload already held by the input buffer, on the caller's current stream.

        Args:
            copy_handle: the handle returned by the latest ``copy_inputs_from``; the
                replay stream waits on its event without blocking the host (not when the copy
                was enqueued on this same stream: stream order already holds; never on the
                per-thread default stream). The replay consumes it: passing it again raises.
                Omit it only to replay the current payload again.
            copy_output: return independent storage instead of the borrowed output.
            synchronize: synchronize the device before returning (the spec's
                device-wide wait: it invalidates a capture that another thread is
                running on this device; concurrent workers wait on their own stream).

        Raises:
            ExecutionError: the program is closed.
            CudaGraphInputError: ``copy_handle`` is not the latest handle of this
                program, or is omitted while a prepared copy is outstanding.
        """
        if self._closed:
            raise ExecutionError(_CLOSED)
        latest = self._latest_copy
        if copy_handle is None:
            if latest is not None:
                raise CudaGraphInputError(
                    "replay_prepared must receive the latest CopyHandle while a prepared input copy is outstanding"
                )
        elif copy_handle is not latest:
            if isinstance(copy_handle, CopyHandle) and copy_handle._belongs_to(self._buffer._token):
                raise CudaGraphInputError(
                    "replay_prepared requires the latest CopyHandle returned by this CudaGraphProgram: this one was "
                    "consumed by a replay or superseded by a later copy; omit copy_handle to replay the current "
                    "payload again"
                )
            raise CudaGraphInputError("replay_prepared requires the latest CopyHandle returned by this CudaGraphProgram")
        if self._runtime.getDevice() != self._device_index:
            with self._cupy.cuda.Device(self._device_index):
                return self._replay_prepared(copy_handle, copy_output, synchronize)
        return self._replay_prepared(copy_handle, copy_output, synchronize)

    def _replay_prepared(self, copy_handle: CopyHandle | None, copy_output: bool, synchronize: bool) -> _OutputT:
        stream = self._current_stream()
        sptr = stream.ptr
        ident = stream_identity(sptr)
        last = self._events.last
        if last is not None and self._last_stream != ident:
            self._runtime.streamWaitEvent(sptr, last.ptr, 0)
        if copy_handle is not None and copy_handle._stream != ident:  # on its own stream: in order already
            self._runtime.streamWaitEvent(sptr, copy_handle.event.ptr, 0)
        return self._launch_graph(stream, sptr, ident, None, copy_output, synchronize)

    def replay(self, *inputs: object, copy_output: bool = False, synchronize: bool = False) -> _OutputT:
        """Validate and copy ``inputs``, replay, and return the output; all on the caller's stream.

        The whole tree is validated before the first byte moves. Sources may be on the
        host or on any CUDA device; a CUDA source produced on another stream must be
        ready (or use ``copy_inputs_from(..., wait_for=...)``). When every source is
        device memory of the program's device, the copies are memcpy nodes of further
        executables of the graph (``runtime._graph_execs``: a driver call only when none of
        them copies from these addresses already); otherwise one ``cudaMemcpyAsync`` per
        leaf precedes the launch. Either way the copies run in stream order before the
        graph's work. A replay that reaches its launch (even one that fails), or whose copies fail
        partway, supersedes an outstanding ``copy_inputs_from`` handle; after copies that failed
        partway, later copies and replays still order behind the ones enqueued.
        ``copy_output`` and ``synchronize`` are as for :meth:`replay_prepared`.

        Raises:
            ExecutionError: the program is closed.
            CudaGraphInputError: structure or value state differs from capture, or an input
                shares memory with the program's input storage other than exactly its own
                slot (a borrowed output that views an input, passed in another position):
                nothing is enqueued.
        """
        if self._closed:
            raise ExecutionError(_CLOSED)
        try:
            leaves = self._collect(inputs)
            starts = self._buffer._check_disjoint(leaves)  # copied leaf by leaf: no source may overlap another's target
        except ExecutionInputError as error:
            raise CudaGraphInputError(str(error)) from error
        if self._runtime.getDevice() != self._device_index:
            with self._cupy.cuda.Device(self._device_index):
                return self._replay(leaves, starts, copy_output, synchronize)
        return self._replay(leaves, starts, copy_output, synchronize)

    def _replay(self, leaves: list[Any], starts: list[int], copy_output: bool, synchronize: bool) -> _OutputT:
        runtime = self._runtime
        stream = self._current_stream()
        sptr = stream.ptr
        ident = stream_identity(sptr)
        last = self._events.last
        if last is not None and self._last_stream != ident:
            runtime.streamWaitEvent(sptr, last.ptr, 0)  # the previous replay may still read the inputs
        latest = self._latest_copy
        if latest is not None and latest._stream != ident:
            runtime.streamWaitEvent(sptr, latest.event.ptr, 0)  # write-after-write with a prepared copy
        nodes = self._input_nodes
        if nodes is not None:
            sources = nodes.device_sources(leaves)
            if sources is not None:  # every source is device memory of this device: the graph copies them itself
                return self._launch_graph(stream, sptr, ident, leaves, copy_output, synchronize, sources)
        return self._launch_graph(stream, sptr, ident, leaves, copy_output, synchronize, copy_starts=starts)

    def _launch_graph(self, stream: Any, sptr: int, ident: object, sources: Any, copy_output: bool,
                      synchronize: bool, node_sources: list[int] | None = None, *,
                      copy_starts: list[int] | None = None) -> _OutputT:
        """Launch on ``stream`` (handle ``sptr``, ``stream_identity`` ``ident``: computed once per
        replay by the caller) and return the output: the captured graph, or with
        ``node_sources`` (``InputCopyGraph.device_sources`` of ``sources``) the input-copy
        graph, which copies them itself. ``copy_starts`` (their addresses, from the buffer's
        ``_check_disjoint``): first enqueue ``sources``' copies into the input buffer
        (``replay()``'s ``cudaMemcpyAsync`` form), inside the cleanup below,
        so that copies failing partway are ordered and retire the prepared handle as a failed
        launch does."""
        pool = self._pool
        try:
            if copy_starts is not None:
                self._enqueue_copies(sources, sptr, self._memcpy_async, copy_starts)
            if pool is not None:
                pool._wait_for_chain(self._runtime, sptr, ident)  # scratch is shared: serialize
            if node_sources is None:
                self._launch(stream)
            else:
                self._launch_with_input_nodes(node_sources, stream, sptr, sources)
            if self._torch_outputs:
                bump_autograd_versions(self._torch_outputs)
            if copy_output:
                with stream:
                    result = self._output.clone(stream)
            else:
                result = self._borrow()
        finally:
            # recorded whatever happened (input copies that failed partway, a launch the driver
            # refused, an owned copy that ran out of memory): later input copies, replays and pool
            # members order behind the input copies already enqueued, this replay and the part of
            # the output copy that was enqueued, and replay() sources stay alive until then
            event = self._record(stream, sources)  # keeps replay() sources alive until the copy is done
            self._last_stream = ident
            if pool is not None:
                pool._extend_chain(event, ident)
            self._latest_copy = None
        if synchronize:
            self._runtime.deviceSynchronize()
        return result  # type: ignore[return-value]

    def _launch_with_input_nodes(self, node_sources: list[int], stream: Any, sptr: int, sources: Any) -> None:
        nodes = self._input_nodes
        assert nodes is not None
        try:
            nodes.launch(node_sources, sptr)
        except DriverError:
            # the driver refused a source (nothing launched): from now on this program's
            # copies are cudaMemcpyAsync calls again
            self._input_nodes = None
            nodes.close()
            self._enqueue_copies(sources, sptr, self._memcpy_async)
            self._launch(stream)
            return
        if self._input_torch_targets:  # the copy rewrote them, as torch's own copy_ would bump them
            bump_autograd_versions(self._input_torch_targets)

    # -- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Wait for the last replay and pending copies, then release graph, buffers and arena.

        Idempotent. Afterwards every method and property except ``device``, ``stats``,
        ``pool`` and ``closed`` raises ``ExecutionError``. Launches made directly on ``cuda_graph`` and
        readers of borrowed outputs on other streams are not waited for: finish them
        first. Borrowed outputs the caller still holds keep their memory alive but must
        not be used. If a wait fails (a CUDA error, such as a sticky one left by a faulting
        kernel), everything is still released and the program closed; the first such error is
        raised afterwards, once (not from ``__exit__`` while another exception propagates).
        """
        self._close(raise_errors=True)

    def _close(self, *, raise_errors: bool) -> None:
        if self._closed:
            return
        errors = TeardownErrors()
        last = self._events.last
        if last is not None:
            errors.run(last.synchronize)  # the newest replay completed, so all did
        if self._input_nodes is not None:
            errors.run(self._input_nodes.close)
            self._input_nodes = None
        if self._rooted is not None:
            errors.run(self._rooted.close)
            self._rooted = None
        errors.run(self._buffer.close)  # waits for in-flight copies
        self._finalizer.detach()
        self._events.release_all()
        self._graph = None
        self._launch = None
        self._kept_alive = ()  # no replay can read them any more
        self._output = None  # type: ignore[assignment]
        self._borrow = None  # type: ignore[assignment]
        self._torch_outputs = ()
        self._input_torch_targets = ()  # (torch views of the input storage keep it alive through DLPack)
        self._static_inputs = ()
        self._function = None  # type: ignore[assignment]
        self._latest_copy = None
        self._enqueue_copies = None  # type: ignore[assignment]
        if self._arena is not None:
            self._arena.close()
            self._arena = None
        if self._pool is not None:
            self._pool._forget(self)
        self._closed = True
        if raise_errors:
            errors.raise_first()

    def _require_open(self) -> None:
        if self._closed:
            raise ExecutionError(_CLOSED)

    def __enter__(self) -> CudaGraphProgram[_OutputT]:
        self._require_open()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._close(raise_errors=exc_type is None)  # never masks the exception that ends the block

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"inputs={self._buffer.nbytes} bytes"
        pooled = " pooled" if self._pool is not None else ""
        return f"<CudaGraphProgram {self._device}{pooled} {state}>"
