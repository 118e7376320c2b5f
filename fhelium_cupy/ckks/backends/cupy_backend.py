"""The CuPy backend: the ``CkksBackend`` contract on our CUDA kernels (``kernels/*.cu``).

Bit-identical to ``NumpyBackend`` (the contract is integer math with canonical residues).
Every primitive is a fixed number of ``RawKernel`` launches on the current stream, batched
over every limb, component and batch entry; nothing synchronizes the host. Tables (moduli
constants, twiddles, row maps, Galois index maps, ModUp/ModDown/rescale constants) are built
with Python integers on the first call for a given ``rows`` tuple (or Galois element) and
cached on the device, so every later call is capturable in a CUDA graph.

The host-side table builders live in ``_cupy_tables`` (NumPy only, re-exported here); CuPy
is imported when a ``CupyBackend`` is constructed.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..._once import get_or_build
from ...interop.arrays import data_pointer
from ...interop.devices import as_device
from ...runtime.retention import is_collecting, retain_for_capture
from ..encoding import crt_reconstructor, signed_to_residues
from ._cupy_tables import (
    active_digits,
    byte_group_words,
    byte_table_fits,
    coefficient_automorphism_map,
    crt_table,
    moddown_rescale_tables,
    moddown_tables,
    modulus_constants,
    modup_byte_table,
    modup_spread_table,
    modup_tables,
    ntt_automorphism_permutation,
    ntt_row_skip_table,
    rescale_table,
    shoup_companion,
    twiddle_tables,
)
from .base import (
    Domain,
    RingContext,
    check_domain,
    check_keyswitch_add_rescale,
    check_linear_transform,
    check_ntt_components,
    keyswitch_from_digits_many_by_loop,
    ntt_forward_and_modup_by_calls,
)

__all__ = [
    "CupyBackend",
    "active_digits",
    "coefficient_automorphism_map",
    "modulus_constants",
    "moddown_tables",
    "modup_tables",
    "ntt_automorphism_permutation",
    "rescale_table",
    "shoup_companion",
    "twiddle_tables",
]

_CHUNK_LOG = 12  # largest shared-memory chunk of the NTT: 4096 words (+1/16 padding) = 34 KiB
_MIN_CHUNK_LOG = 10  # smallest chunk chosen to fill the GPU when few polynomials are batched
_MAX_COLUMN_STAGES = 4  # ntt.cu instantiates 1..4 register column stages
_COEFFS_PER_THREAD_LOG = 3  # ntt.cu FHE_LV: chunk kernels hold 8 coefficients per thread
_F64_MAX_Q = 1 << 45  # modarith_f64.cuh F64_MAX_Q: primes below it take the float64 arithmetic
_F64_CHUNK_LOG_MIN = 11  # ntt.cu FHE_F64_CHUNK_DISPATCH: the _f64 chunk kernels' chunks, 2^11 and 2^12
_FILL_BLOCKS = 1056  # eight blocks per SM of an H100/H200 (132 SMs); see CupyBackend(ntt_fill_blocks=)
_BLOCK = 256
_COLUMN_BLOCK = 128
_MAX_GRID_YZ = 65535
_CRT_MAX_LIMBS = 64  # kernels/rns.cu FHE_CRT_MAX_LIMBS
_CACHE_LIMIT = 65536  # entries; past it the open-ended kinds below are dropped on the next miss of one
_EVICTABLE = ("scalar", "keyptrs", "row_skip")  # one entry per scalar tuple / key-address tuple / batch size
# Open-ended kinds of large tables (E x N int32 index maps, one per Galois-element tuple: 512 KiB
# for two elements at N=2^16): past _LARGE_LIMIT of them a miss drops them all.
_LARGE_EVICTABLE = ("perms", "coefmaps")
_LARGE_LIMIT = 64
_MAX_STATIC_SMEM = 48 * 1024  # dynamic shared memory a launch gets without an opt-in attribute
_BYTES_COLUMN_SLOT = 258  # keyswitch.cu FHE_BYTES_COLUMN_SLOT (a test ties the copies): words a target slot of the fused ModUp
_BASE_CONVERT_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16)  # keyswitch.cu keyswitch_base_convert_s* (s0: any)


# --- host-side tables (NumPy + Python ints) ------------------------------------------
_CONVERT_COMBINE_SIZES = (1, 2, 3, 4, 5, 6, 7, 8)  # keyswitch.cu keyswitch_moddown_convert_combine_s* (s0: any)


def _base_convert_kernel(size: int, family: str = "keyswitch_base_convert",
                         sizes: tuple[int, ...] = _BASE_CONVERT_SIZES) -> str:
    """The ``{family}_s*`` instantiation for groups of at most ``size`` sources (the smallest
    of ``sizes`` that holds them, else ``s0``, the any-size loop)."""
    return f"{family}_s{next((s for s in sizes if s >= size), 0)}"


def _aligned(a: Any) -> bool:
    """Whether ``a``'s first word is 16-byte aligned: the NTT and key kernels move word pairs
    with 16-byte loads and stores (a view starting at an odd word would fault). Every
    allocation is; only a flat view offset by an odd number of words is not."""
    return data_pointer(a) % 16 == 0 or a.size == 0


def _prod(shape: Sequence[int]) -> int:
    return int(math.prod(shape))


def _check_branch_streams(value: Any) -> int:
    """``branch_streams`` as an int >= 1 (``CupyBackend``'s argument and attribute)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"branch_streams must be an int >= 1, got {value!r}")
    return int(value)


class CupyBackend:
    """Exact RNS primitives on the GPU (``CkksBackend``), bit-identical to ``NumpyBackend``.

    Args:
        context: the ring (any ``RingContext``).
        device: ``"cuda"``, ``"cuda:N"``, an int or a ``cupy.cuda.Device``; arrays handed to
            this backend must live there.
        l2_group_bytes: forward/inverse NTTs larger than this are issued in groups of at most
            this many bytes, so the second pass finds the first pass's output in L2
            (default 0: no grouping, 2 launches per transform; bench/kernels_gpu.py measures both).
        base_convert_tile: target rows per thread of the ModUp/ModDown base conversion (grid y
            = target tiles; default 0 = all targets in one thread, the fastest on the H200:
            N=2^16 ModUp 324 us against 340 with tiles of 8 and 375 with 4;
            bench/kernels_gpu.py --tiles measures).
        ntt_fill_blocks: the NTT chunk is the largest (<= 2^12 words) whose chunk-stage grid has
            at least this many blocks; larger values pick smaller chunks for small batches.
            Default 1056 (eight per SM of an H100/H200), measured on the H200 against 264 and
            528 side by side: N=2^14 ModUp 33.5 us (264: 40.1), hoisted 8-diagonal matvec
            239.7 us (264: 252.6), N=2^16 unchanged (bench/kernels_gpu.py --fill).
        linear_transform_parts: rotation parts of the double-hoisting accumulator (1, 2 or 4;
            default 0 = ``_linear_transform_parts``'s choice from the grid's waves): each part
            is a grid plane summing a share of the rotations, and one ``rns_sum_batch`` launch
            adds the parts, so a grid that would leave a nearly empty last wave runs as more,
            shorter blocks (with blocks of 256, 4 per SM: N=2^14, 8 diagonals was 576 blocks
            for 528 slots, 4% faster in two parts; the default build's 128 x 9 fits one wave).
        branch_streams: streams ``run_independent`` spreads independent tasks over (the
            caller's and up to ``branch_streams - 1`` side streams; 1 = everything on the
            caller's stream). Default: the ``FHE_BRANCH_STREAMS`` define of ``kernel_options``,
            else 8. Measured on the H200 (2026-11-30 s16), FHElium's independent N=2^14 matvec
            (7 rotations), graph: 424 us on 1 stream, 342 on 2, 323 on 3, 296 on 4, 292 on 7
            or 8. Each side stream keeps its own scratch (CuPy's pool and the graph arena reuse
            per stream), so memory grows with it. A settable property (checked when set).
        kernel_options: a ``runtime.kernels.KernelOptions`` for the kernel library (default:
            the standard build). Its ``-D`` defines select build-time variants of
            ``kernels/*.cu`` for A/B measurements (``bench/kernels_gpu.py --ntt-variants``);
            the chunk kernels' launch geometry follows ``FHE_LV`` and ``FHE_NTT_BATCH_FAST_LOG_N``, and
            ``FHE_MODDOWN_FUSED_COMBINE=0`` restores the separate combine kernel of the
            NTT-output divisions (coefficient-output divisions always combine in their base
            conversion, ``keyswitch_moddown_convert_combine_s*``). ``FHE_BC_BYTES_MIN_SOURCES``
            (default 6; 0 = never) is the smallest ModUp digit converted on tensor cores
            (``keyswitch_base_convert_bytes_mma``: sources below 2^48, at most 9 a digit, sm_80
            or newer): at N=2^16 with digits of 9 primes 98 -> 72 us, with 4 or 3 primes slower
            than the scalar kernels (bench/kernels_gpu.py, H200 2026-11-30). Where the ModUp's
            NTT has column stages that conversion runs them too
            (``keyswitch_base_convert_bytes_mma_columns``; ``FHE_BYTES_COLUMNS=0``: the column
            kernel does): at N=2^16 dnum 4 the ModUp 205 -> 197 us, one launch less.

    Stream: every method enqueues on CuPy's current stream and never synchronizes, except
    ``to_numpy``. The first call for a new ``rows`` tuple (or Galois element) builds and
    uploads tables; warm up before capturing.

    ``launch_count`` counts the kernel launches this backend enqueued, from every thread (a
    diagnostic for launches per operation; an unlocked increment, so launches made at the same
    moment by two threads may count once).

    Raises:
        CudaUnavailableError: If CuPy, a GPU or NVRTC is missing.
    """

    name = "cupy"

    def __init__(
        self,
        context: RingContext,
        device: Any = "cuda",
        *,
        l2_group_bytes: int = 0,
        base_convert_tile: int = 0,
        ntt_fill_blocks: int = _FILL_BLOCKS,
        linear_transform_parts: int = 0,
        branch_streams: int | None = None,
        kernel_options: Any = None,
    ) -> None:
        from fhelium_cupy.runtime.kernels import KernelLibrary, require_cuda

        cp = require_cuda()
        self.xp = cp
        self.context = context
        self._device = self._parse_device(cp, device)
        self.device_id = int(self._device.id)
        self._library = KernelLibrary.for_device(self._device.id, options=kernel_options)
        # launch geometry of the chunk kernels' build-time variants (kernels/ntt.cu)
        options = self._library.options
        self._ntt_values_log = options.define_int("FHE_LV", _COEFFS_PER_THREAD_LOG)
        # largest log2 chunk the _v4 chunk kernels (4 coefficients per thread) run; 0 = none
        self._ntt_v4_max_log_chunk = options.define_int("FHE_NTT_V4_MAX_LOG_CHUNK", 12)
        # two threads per column in the column kernels (_x2): 0 never, 1 always (2..4 column
        # stages), 2 when one thread per column leaves the GPU underfilled (_use_column_x2)
        self._ntt_column_x2 = options.define_int("FHE_NTT_COLUMN_X2", 2)
        # the _f64 chunk kernels for launches whose rows all take the float64 arithmetic
        # (_f64_rows); FHE_NTT_F64_CHUNK=0 or FHE_NTT_F64=0: never
        self._ntt_f64_chunk = (options.define("FHE_NTT_F64_CHUNK", "1") != "0"
                               and options.define("FHE_NTT_F64", "1") != "0")
        self._f64_by_rows: dict[tuple[int, ...], bool] = {}  # _f64_rows per rows tuple (eager calls ask each time)
        self._fused_combine = options.define("FHE_MODDOWN_FUSED_COMBINE", "1") != "0"
        # ModUp groups of at least this many sources convert on tensor cores
        # (keyswitch_base_convert_bytes_mma, compute capability 8.0 and newer); 0 = never
        self._bytes_min_sources = options.define_int("FHE_BC_BYTES_MIN_SOURCES", 6)
        self._bytes_coeffs = options.define_int("FHE_BYTES_COEFFS", 512)  # its coefficients per block
        # such a ModUp's conversion runs its NTT's column stages too
        # (keyswitch_base_convert_bytes_mma_columns, _bytes_columns_fit); 0 = the column kernel does
        self._bytes_columns = options.define("FHE_BYTES_COLUMNS", "1") != "0"
        # ModDown conversions (wide sources, targets below 2^54) hold their weights in 27-bit pieces
        # (keyswitch.cu weight pieces; 0 = plain weights, the 64 x 64-bit sums)
        self._weight_pieces = options.define("FHE_BC_WEIGHT_PIECES", "1") != "0"
        # a one-prime division's _x2 column input finishes the inverse NTT of the divided-out row
        # itself (ntt_inverse_column_stages_rescale_spread_x2): 0 never (its own inverse column
        # launch), 1 whenever the column input is _x2, 2 (default) for small launches only
        self._inverse_spread = options.define_int("FHE_INVERSE_SPREAD", 2)
        self._kip_threads = options.define_int("FHE_NTT_KIP_THREADS", 1024)  # rotate_keyswitch's chunk kernel
        # an NTT-output key switch's P rows go through the ModDown's inverse NTT and conversion on
        # a side stream while the inner product of its Q rows runs (_overlaps_moddown); 0 = in turn
        self._moddown_overlap = options.define("FHE_MODDOWN_OVERLAP", "1") != "0"
        # blocks of 256 per SM the Q rows' inner product then launches where it has no more digits
        # than there are special primes (its threads stride over the rows), leaving SMs to the side
        # stream; 0 = one block per 256 coefficients (_q_rows_kip_blocks)
        self._moddown_kip_blocks = options.define_int("FHE_MODDOWN_KIP_BLOCKS", 4)
        self.branch_streams = options.define_int("FHE_BRANCH_STREAMS", 8) if branch_streams is None else branch_streams
        # keyswitch_linear_transform_accumulate's block and blocks per SM (keyswitch.cu defines)
        self._lt_block = options.define_int("FHE_LT_BLOCK", 128)
        self._lt_min_blocks = options.define_int("FHE_LT_MIN_BLOCKS", 9)
        n = int(context.ring_degree)
        if n < 2 or n & (n - 1):
            raise ValueError(f"ring_degree must be a power of two, got {n}")
        self.n = n
        self.log_n = n.bit_length() - 1
        # the chunk kernels' grid order (ntt.cu FHE_NTT_BATCH_FAST_LOG_N): batch entries first from
        # this ring degree's log on (the default 16: where the twiddle tables outgrow L2)
        self._ntt_batch_fast = self.log_n >= options.define_int("FHE_NTT_BATCH_FAST_LOG_N", 16)
        if self.log_n - _CHUNK_LOG > _MAX_COLUMN_STAGES or self.log_n < self._ntt_values_log:
            raise ValueError(
                f"ring_degree {n} is outside the NTT kernels' range [2^{self._ntt_values_log}, "
                f"2^{_CHUNK_LOG + _MAX_COLUMN_STAGES}]"
            )
        self.log_chunk = min(self.log_n, _CHUNK_LOG)
        self.num_moduli = len(context.moduli)
        if any(q >= 1 << 61 or q % 2 == 0 for q in context.moduli):
            raise ValueError("every modulus must be odd and < 2^61")
        self.p_rows = tuple(range(context.q_count, context.q_count + context.p_count))
        self._big_p = math.prod(context.moduli[j] for j in self.p_rows)  # P: relinearize-and-rescale adds P c
        self.l2_group_bytes = int(l2_group_bytes)
        if base_convert_tile < 0:
            raise ValueError(f"base_convert_tile must be >= 0, got {base_convert_tile}")
        self.base_convert_tile = int(base_convert_tile)
        if ntt_fill_blocks < 1:
            raise ValueError(f"ntt_fill_blocks must be >= 1, got {ntt_fill_blocks}")
        self.ntt_fill_blocks = int(ntt_fill_blocks)
        if linear_transform_parts not in (0, 1, 2, 4):
            raise ValueError(f"linear_transform_parts must be 0, 1, 2 or 4, got {linear_transform_parts!r}")
        self.linear_transform_parts = int(linear_transform_parts)
        self.launch_count = 0
        attributes = getattr(self._device, "attributes", None) or {}
        self._sm_count = int(attributes.get("MultiProcessorCount", 132))  # 132: H100/H200
        # threads the GPU holds at once (2048 per SM on sm_80 / sm_90): a launch below it leaves
        # SMs idle or underfilled (_use_v4, _use_column_x2)
        self._gpu_threads = self._sm_count * int(attributes.get("MaxThreadsPerMultiProcessor", 2048))
        # dynamic shared memory a block may have after the kernel's opt-in (_opt_in_shared_memory)
        self._smem_optin = int(attributes.get("MaxSharedMemoryPerBlockOptin", _MAX_STATIC_SMEM))
        if int(getattr(self._device, "compute_capability", "0") or 0) < 80:
            self._bytes_min_sources = 0  # no integer mma.m16n8k32 before sm_80
        with self._device:
            self._consts = cp.asarray(modulus_constants(context.moduli, n))
        self._cache: dict[Any, Any] = {}
        self._cache_lock = threading.RLock()  # misses, inserts, evictions (builds nest); hits read without it
        self._branches = threading.local()  # per thread: side streams and events (_side_streams)

    @staticmethod
    def _parse_device(cp: Any, device: Any) -> Any:
        """``cupy.cuda.Device`` of a CUDA device description (``interop.devices.as_device``;
        an unindexed one is the current device of the backend's CuPy, as there)."""
        if device is None or device == "cuda":
            return cp.cuda.Device()
        target = as_device(device)
        if target.type != "cuda":
            raise ValueError(f"CupyBackend needs a CUDA device, got {device!r}")
        return cp.cuda.Device(target.index)

    # --- launch + cached device tables ----------------------------------------------
    def _launch(self, name: str, grid: tuple[int, int, int], block: int, args: tuple, shared_mem: int = 0) -> None:
        if grid[1] > _MAX_GRID_YZ or grid[2] > _MAX_GRID_YZ:
            # outputs of the kernels already enqueued are temporaries: nothing the caller holds changed
            raise ValueError(
                f"{name}: grid {grid} exceeds CUDA's 65535 blocks in y or z (limbs, or batch entries times "
                "components, digits or keys); split the batch into smaller stacks"
            )
        if min(grid) == 0:
            return
        self.launch_count += 1
        self._library.function(name)(grid, (block, 1, 1), args, shared_mem=shared_mem)

    @property
    def branch_streams(self) -> int:
        """Streams ``run_independent`` spreads independent tasks over (the constructor's
        ``branch_streams``); setting it checks the value (an int >= 1), so every call reads a
        valid count."""
        return self._branch_streams

    @branch_streams.setter
    def branch_streams(self, value: int) -> None:
        self._branch_streams = _check_branch_streams(value)

    def _side_streams(self, count: int, slot: str = "made") -> tuple[list[Any], Any, list[Any]]:
        """The calling thread's first ``count`` side streams on this backend's device, the
        fork event and one join event per side stream (made on first use, kept per thread:
        threads sharing the backend never wait on each other's events). ``slot`` names the
        set: ``run_independent``'s, or ``"moddown"`` (``_moddown_stream``)."""
        made = getattr(self._branches, slot, None)
        if made is None or len(made[0]) < count:
            cuda = self.xp.cuda
            with self._device:
                made = ([cuda.Stream(non_blocking=True) for _ in range(count)], cuda.Event(disable_timing=True),
                        [cuda.Event(disable_timing=True) for _ in range(count)])
            setattr(self._branches, slot, made)
        return made[0][:count], made[1], made[2][:count]

    def _moddown_stream(self) -> tuple[Any, Any, Any]:
        """The calling thread's side stream of an overlapped ModDown (``_moddown_launch``'s
        ``beside``) with its fork and join events: a set of its own, not ``run_independent``'s."""
        (side,), fork, (join,) = self._side_streams(1, "moddown")
        return side, fork, join

    def run_independent(self, tasks: Sequence[Callable[[], None]]) -> None:
        """Run ``tasks`` (their launches) side by side: task ``i`` on stream ``i % B`` with
        ``B = min(branch_streams, len(tasks))``, stream 0 the caller's and the others
        this thread's side streams, which start after everything the caller's stream had
        enqueued (a fork event) and which the caller's stream waits for before its next
        work (join events). In a CUDA graph capture the side streams join the capture
        through the fork event: the tasks become parallel branches of the graph.

        Contract for the tasks: no task writes memory another task reads or writes (except
        what a task publishes with ``publish_to_branches`` and a later task reads after
        ``wait_for_published``); every
        array a task reads that another stream allocated is referenced by the caller until
        this returns (CuPy's pool and the capture arena reuse a freed block only on the
        stream that allocated it). Device tables a task builds are uploaded synchronously
        (``_upload``), so a table built in one branch is complete before another reads it.
        A capture whose first work is the fork has the branches as its roots; the graph
        runtime launches such a graph behind a single root of its own
        (``runtime._graph_execs.RootedGraph``), so nothing here depends on capturing.
        The joins happen even when a task raises (a capture must end with every stream
        joined). Not reentrant: a task does not call this again."""
        B = min(self._branch_streams, len(tasks))
        if B <= 1:
            for task in tasks:
                task()
            return
        side, fork, joins = self._side_streams(B - 1)
        main = self.xp.cuda.get_current_stream()
        fork.record(main)
        for stream in side:
            stream.wait_event(fork)
        self._branches.open = True
        self._branches.published = []  # this call's publications (publish_to_branches)
        try:
            for i, task in enumerate(tasks):
                if i % B == 0:
                    task()
                else:
                    with side[i % B - 1]:
                        task()
        finally:
            self._branches.open = False
            self._branches.published = []
            for stream, join in zip(side, joins):
                join.record(stream)
                main.wait_event(join)

    def publish_to_branches(self) -> None:
        """See the contract: inside a ``run_independent`` task, the work this task has
        enqueued so far becomes readable by the tasks after it, after their
        ``wait_for_published()``. An event recorded on the task's stream, one per publication
        of this ``run_independent`` call (the thread's events are reused by later calls; one
        event re-recorded by every publication would have kept only the last: tasks on two
        streams publishing, a later task would wait for one of them). In a capture the waits
        become edges of the graph. Outside the branches (one stream) everything is in stream
        order: nothing to do."""
        if not getattr(self._branches, "open", False):
            return
        published = self._branches.published
        pool = getattr(self._branches, "publish_events", None)
        if pool is None:
            pool = self._branches.publish_events = []
        if len(pool) == len(published):
            with self._device:
                pool.append(self.xp.cuda.Event(disable_timing=True))
        event = pool[len(published)]
        event.record(self.xp.cuda.get_current_stream())
        published.append(event)

    def wait_for_published(self) -> None:
        """See the contract: the current stream waits for what an earlier task of this
        ``run_independent`` call published (``publish_to_branches``).

        Raises:
            RuntimeError: inside the branches when no earlier task published anything (a
                task order the caller got wrong; nothing is enqueued).
        """
        if not getattr(self._branches, "open", False):
            return
        published = self._branches.published
        if not published:
            raise RuntimeError("wait_for_published: no earlier task of this run_independent call published")
        stream = self.xp.cuda.get_current_stream()
        for event in published:
            stream.wait_event(event)

    def _cached(self, key: Any, build: Any) -> Any:
        """A device table from the cache (built once). Kernels read these by address, so a
        program capturing this call keeps the table alive (``runtime.retention``): evicting the
        cache entry later (scalar, key-pointer and row-skip tables past 65536 entries, index
        maps past 64) must not free memory a graph still reads.

        Threads: hits read the dict without a lock (one atomic lookup); a miss builds and
        inserts under the lock, so concurrent workers sharing the engine build each table
        once and never iterate the dict while another thread inserts. A miss *inside a
        capture* builds a private table for that graph and does not publish it: its memory
        and its upload belong to the graph (arena memory, a captured copy), so eager code
        must never be handed it. (CuPy 14 refuses that upload: on the H200 a warmup-0
        capture on a cold cache fails, and the error says to warm up.)
        """
        value = self._cache.get(key)
        if value is None:
            if is_collecting():
                try:
                    value = build()
                except Exception as error:  # CuPy 14 refuses host-to-device uploads while capturing
                    raise RuntimeError(
                        f"the device table {key[0]!r} was first needed inside a CUDA Graph capture, where it "
                        f"cannot be uploaded ({type(error).__name__}: {error}); capture with warmup >= 1 (the "
                        "default) so that an eager warmup builds it"
                    ) from error
                retain_for_capture(value)
                return value
            value = get_or_build(self._cache, key, self._cache_lock, self._build_evicting, key, build)
        retain_for_capture(value)
        return value

    def _build_evicting(self, key: tuple, build: Callable[[], Any]) -> Any:
        """``build()`` for a cache miss (under the cache lock), complete on the device before
        it is published (``complete_for_other_streams``: a branch of ``run_independent`` or
        another thread's worker may read it at once on another stream; one wait per table,
        whatever its uploads); first, past ``_CACHE_LIMIT`` entries, a miss of an open-ended
        kind drops every entry of those kinds, and past ``_LARGE_LIMIT`` index maps a miss of
        one drops them all, after a device synchronize (in place: lock-free hits keep reading
        the one dict; graphs that read a dropped table keep it alive themselves, ``_cached``)."""
        stale: list[Any] = []
        if len(self._cache) > _CACHE_LIMIT and key[0] in _EVICTABLE:
            stale += [k for k in self._cache if k[0] in _EVICTABLE]
        if key[0] in _LARGE_EVICTABLE:
            large = [k for k in self._cache if k[0] in _LARGE_EVICTABLE]
            stale += large if len(large) >= _LARGE_LIMIT else []
        if stale:
            # kernels on any stream may still read them by address (a branch of run_independent
            # beside the allocating stream): their memory returns to the pool only once the
            # device is idle (a rare event: never inside a capture, whose misses do not get here)
            self._device.synchronize()
            for k in stale:
                del self._cache[k]
        value = build()
        self.complete_for_other_streams()
        return value

    def _upload(self, host: np.ndarray) -> Any:
        """A device copy of a host table, ordered on the current stream (a ``_cached`` build's:
        the cache waits for it before publishing the table)."""
        with self._device:
            return self.xp.asarray(np.ascontiguousarray(host))

    def complete_for_other_streams(self) -> None:
        """Wait until the work enqueued on the device's current stream has finished, unless
        that stream is capturing: what it built (a table, a key) is about to be shared with
        work on other streams, which nothing else orders after it."""
        with self._device:
            stream = self.xp.cuda.get_current_stream()
            if not stream.is_capturing():
                stream.synchronize()

    def _rows(self, rows: Sequence[int]) -> tuple[tuple[int, ...], Any]:
        rows = tuple(int(r) for r in rows)

        def build() -> Any:
            if any(r < 0 or r >= self.num_moduli for r in rows):
                raise ValueError(f"rows {rows} are not prime ids of this context")
            return self._upload(np.array(rows, dtype=np.int32))

        return rows, self._cached(("rows", rows), build)

    def _tw(self) -> tuple[Any, Any]:
        """Device twiddles ``(forward, inverse)``, each ``[M, N, 2]``: (w, Shoup(w)) pairs, a view
        of the head of its allocation; the rest of the allocation holds ``[M, N]`` float64 copies
        of w (exact below 2^53), which the kernels' float64 arithmetic reads for the primes below
        2^45 (ntt_stages.cuh ``twiddle_row``): pass only these tables to the NTT kernels."""

        def build() -> tuple[Any, Any]:
            tables = [twiddle_tables(q, psi, self.n) for q, psi in zip(self.context.moduli, self.context.psi)]

            def upload(i: int) -> Any:
                pairs = np.stack([np.stack([t[i], t[i + 1]], axis=-1) for t in tables])
                floats = np.stack([t[i] for t in tables]).astype(np.float64).view(np.uint64)
                words = self._upload(np.concatenate([pairs.ravel(), floats.ravel()]))
                return words[: pairs.size].reshape(pairs.shape)

            return upload(0), upload(2)

        return self._cached(("twiddles",), build)  # type: ignore[no-any-return]

    def _check(self, a: Any, rows: tuple[int, ...], what: str) -> Any:
        if a.dtype != np.uint64 or a.ndim < 2 or a.shape[-1] != self.n or a.shape[-2] != len(rows):
            raise ValueError(
                f"{what}: expected uint64 [..., {len(rows)}, {self.n}] for rows {rows}, got {a.dtype} {a.shape}"
            )
        return self._c_aligned(a)

    def _c_aligned(self, a: Any) -> Any:
        """``a`` itself when C-contiguous and 16-byte aligned (``_aligned``), else a copy in a
        fresh allocation, which is both."""
        if a.flags.c_contiguous and _aligned(a):
            return a
        return self.xp.array(a, order="C", copy=True)

    def _check_entries(self, b: Any, rows: tuple[int, ...], what: str) -> tuple[Any, int]:
        """``_check`` for a read-only ``b [count, L, N]`` whose entries may lie any whole number
        of words apart, each ``[L, N]`` block contiguous (a QP plaintext's Q limbs, the
        components of ``ntt_forward_and_modup``'s NTT view): ``(b, entry stride in words)``,
        copied only when an entry itself is not contiguous."""
        if b.ndim == 3 and b.dtype == np.uint64 and b.shape[1:] == (len(rows), self.n):
            if b.strides[1:] == (8 * self.n, 8) and b.strides[0] % 16 == 0 and b.strides[0] >= 0 and _aligned(b):
                return b, (b.strides[0] // 8 if b.shape[0] > 1 else len(rows) * self.n)
        b = self._check(b, rows, what)
        return b, len(rows) * self.n

    def _out(self, out: Any, shape: tuple[int, ...], what: str) -> Any:
        if out is None:
            return self.xp.empty(shape, dtype=np.uint64)
        if tuple(out.shape) != tuple(shape) or out.dtype != np.uint64 or not out.flags.c_contiguous:
            raise ValueError(f"{what}: out must be C-contiguous uint64 {shape}, got {out.dtype} {out.shape}")
        if not _aligned(out):
            raise ValueError(f"{what}: out must start on a 16-byte boundary (the kernels store word pairs)")
        return out

    # --- residency -------------------------------------------------------------------
    def asarray(self, host: Any) -> Any:
        with self._device:
            return self.xp.array(np.asarray(host, dtype=np.uint64), dtype=np.uint64, order="C", copy=True)

    def to_numpy(self, array: Any) -> np.ndarray:
        return np.ascontiguousarray(self.xp.asnumpy(array), dtype=np.uint64)

    def rns_from_integers(self, coefficients: Any, rows: Sequence[int]) -> Any:
        """Host int64 coefficients ``[..., N]`` (``|c| < 2**62``) -> canonical residues ``[..., L, N]``
        on the device: the integers are uploaded (8 bytes a coefficient, not 8 L) and reduced
        there, exactly as ``encoding.integers_to_rns``. Not capturable (a host upload)."""
        rows, _ = self._rows(rows)
        host = np.ascontiguousarray(coefficients, dtype=np.int64)
        if host.ndim < 1 or host.shape[-1] != self.n:
            raise ValueError(f"rns_from_integers: expected int64 [..., {self.n}], got {host.shape}")
        q = self._cached(("moduli_column", rows),
                         lambda: self._upload(np.array([self.context.moduli[r] for r in rows], np.uint64)[:, None]))
        with self._device:
            return self.xp.ascontiguousarray(signed_to_residues(self.xp.asarray(host), q, self.xp))

    def centered_crt_to_float(self, a: Any, rows: Sequence[int]) -> np.ndarray:
        """Decoding's CRT on the device (``rns_centered_crt_to_double``, bit-identical to the host's
        ``CrtReconstructor``), then one float64 a coefficient to the host. More than
        ``_CRT_MAX_LIMBS`` rows: the host's reconstructor."""
        rows, _ = self._rows(rows)
        a = self._check(a, rows, "centered_crt_to_float")
        L, n = len(rows), self.n
        if L > _CRT_MAX_LIMBS:
            return crt_reconstructor(tuple(self.context.moduli[r] for r in rows))(self.to_numpy(a))
        lead = tuple(a.shape[:-2])
        table = self._cached(("crt", rows), lambda: self._upload(crt_table(self.context, rows)))
        with self._device:
            out = self.xp.empty(lead + (n,), dtype=np.float64)
            self._launch("rns_centered_crt_to_double", (-(-n // _BLOCK), 1, _prod(lead)), _BLOCK,
                         (a, out, table, np.int32(L), np.int32(n)))
            return np.ascontiguousarray(self.xp.asnumpy(out))

    def moddown(self, x: Any, rows: Sequence[int]) -> Any:
        """The contract's rounding ``moddown`` of coefficient ``x [..., L + K, N]`` over ``rows +
        p_rows`` -> ``[..., L, N]``: the key switch's coefficient ModDown, the P rows' base
        conversion and the combine in one launch (``_convert_combine``)."""
        rows, _ = self._rows(rows)
        L, K, n = len(rows), len(self.p_rows), self.n
        x = self._check(x, rows + self.p_rows, "moddown")
        lead = tuple(x.shape[:-2])
        entries = _prod(lead)
        if entries > _MAX_GRID_YZ:
            raise ValueError(f"moddown: {entries} polynomials exceed the launch grid's limit of {_MAX_GRID_YZ}")
        t = self._keyswitch_device(rows)
        out = self.xp.empty(lead + (L, n), dtype=np.uint64)
        x3 = x.reshape(entries, L + K, n)
        # plain polynomials: batch = entries puts entry z at z * L * N (the strides are unused)
        self._convert_combine(x3, x3, out, t["down"], t["pinv"], L, entries, entries, (L + K) * n, 0, 0)
        return out

    def is_capturing(self) -> bool:
        """Whether the current stream of the backend's device is recording a CUDA graph."""
        with self._device:
            return bool(self.xp.cuda.get_current_stream().is_capturing())

    # --- element-wise ----------------------------------------------------------------
    def _binary(self, name: str, a: Any, b: Any, rows: Sequence[int], out: Any) -> Any:
        rows, rowmap = self._rows(rows)
        shape = tuple(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
        a = self._check(a, rows, name)
        b = self._check(b, rows, name)
        plane = len(rows) * self.n
        strides: list[int | None] = []
        for x in (a, b):
            if tuple(x.shape) == shape:
                strides.append(plane)
            elif _prod(x.shape[:-2]) == 1:
                strides.append(0)
            else:
                strides.append(None)
        if None in strides:
            a = self.xp.ascontiguousarray(self.xp.broadcast_to(a, shape))
            b = self.xp.ascontiguousarray(self.xp.broadcast_to(b, shape))
            strides = [plane, plane]
        stride_a, stride_b = (plane if s is None else s for s in strides)
        out = self._out(out, shape, name)
        batch = _prod(shape[:-2])
        grid = (-(-self.n // _BLOCK), len(rows), batch)
        args = (a, b, out, rowmap, self._consts, np.int32(self.num_moduli), np.int32(self.n),
                np.int64(stride_a), np.int64(stride_b), np.int64(plane))
        self._launch(name, grid, _BLOCK, args)
        return out

    def _unary(self, name: str, a: Any, rows: Sequence[int], out: Any, extra: tuple = ()) -> Any:
        rows, rowmap = self._rows(rows)
        a = self._check(a, rows, name)
        out = self._out(out, tuple(a.shape), name)
        plane = len(rows) * self.n
        grid = (-(-self.n // _BLOCK), len(rows), _prod(a.shape[:-2]))
        if extra:  # rns_mul_scalar: (a, out, scal, rowmap, consts, M, n, limbs, a_bs, out_bs)
            args = (a, out, *extra, rowmap, self._consts, np.int32(self.num_moduli), np.int32(self.n),
                    np.int32(len(rows)), np.int64(plane), np.int64(plane))
        else:
            args = (a, out, rowmap, self._consts, np.int32(self.num_moduli), np.int32(self.n),
                    np.int64(plane), np.int64(plane))
        self._launch(name, grid, _BLOCK, args)
        return out

    def add(self, a, b, rows, *, out=None):
        return self._binary("rns_add", a, b, rows, out)

    def sub(self, a, b, rows, *, out=None):
        return self._binary("rns_sub", a, b, rows, out)

    def mul(self, a, b, rows, *, out=None):
        return self._binary("rns_mul", a, b, rows, out)

    def mul_montgomery(self, a, b, rows, *, out=None):
        return self._binary("rns_mul_montgomery", a, b, rows, out)

    def neg(self, a, rows, *, out=None):
        return self._unary("rns_neg", a, rows, out)

    def to_montgomery(self, a, rows, *, out=None):
        return self._unary("rns_to_montgomery", a, rows, out)

    def from_montgomery(self, a, rows, *, out=None):
        return self._unary("rns_from_montgomery", a, rows, out)

    def _scalar_table(self, rows: tuple[int, ...], scalars: Sequence[int]) -> Any:
        values = tuple(int(s) for s in scalars)
        if len(values) != len(rows):
            raise ValueError(f"mul_scalar: {len(values)} scalars for {len(rows)} limbs")
        return self._cached(("scalar", rows, values), lambda: self._upload(self._shoup_scalars(rows, values)))

    def _shoup_scalars(self, rows: tuple[int, ...], values: Sequence[int]) -> np.ndarray:
        """``[w_y | Shoup(w_y)]`` over ``rows`` with ``w_y = values[y] mod q_y`` (rns.cu
        ``rns_mul_scalar``; keyswitch.cu ``keyswitch_inner_product_add_scaled``)."""
        moduli = [self.context.moduli[r] for r in rows]
        w = [v % q for v, q in zip(values, moduli)]
        return np.array(w + [shoup_companion(x, q) for x, q in zip(w, moduli)], dtype=np.uint64)

    def mul_scalar(self, a, scalars, rows, *, out=None):
        rows = tuple(int(r) for r in rows)
        return self._unary("rns_mul_scalar", a, rows, out, extra=(self._scalar_table(rows, scalars),))

    def mul_montgomery_sum(self, a, b, rows):
        """See the contract. ``b`` may be a view whose entries are any whole number of words
        apart as long as each ``[L, N]`` block is contiguous (the Q limbs of a QP-basis
        plaintext: read in place, not copied)."""
        rows, rowmap = self._rows(rows)
        a = self._check(a, rows, "mul_montgomery_sum")
        if a.ndim != 4 or b.ndim != 3 or tuple(b.shape) != tuple(a.shape[1:]):
            raise ValueError(f"mul_montgomery_sum: expected a [outer, count, L, N] and b [count, L, N], "
                             f"got {a.shape} and {b.shape}")
        b, b_plane = self._check_entries(b, rows, "mul_montgomery_sum")
        outer, count = int(a.shape[0]), int(a.shape[1])
        out = self.xp.empty((outer, len(rows), self.n), dtype=np.uint64)
        if count == 0:
            out.fill(0)
            return out
        self._launch("rns_mul_montgomery_sum", (-(-self.n // _BLOCK), len(rows), outer), _BLOCK,
                     (a, b, out, rowmap, self._consts, np.int32(self.num_moduli), np.int32(self.n),
                      np.int32(len(rows)), np.int32(count), np.int64(b_plane)))
        return out

    def sum_batch(self, a, axis, rows):
        rows, rowmap = self._rows(rows)
        a = self._check(a, rows, "sum_batch")
        ax = int(axis) % a.ndim
        if ax >= a.ndim - 2:
            raise ValueError("sum_batch cannot sum over the limb or coefficient axis")
        outer, count, inner = _prod(a.shape[:ax]), int(a.shape[ax]), _prod(a.shape[ax + 1 : -2])
        out = self.xp.empty(a.shape[:ax] + a.shape[ax + 1 :], dtype=np.uint64)
        args = (a, out, rowmap, self._consts, np.int32(self.num_moduli), np.int32(self.n), np.int32(len(rows)),
                np.int32(count), np.int32(inner))
        if count == 0:
            out.fill(0)
            return out
        self._launch("rns_sum_batch", (-(-self.n // _BLOCK), len(rows), outer * inner), _BLOCK, args)
        return out

    def tensor_product(self, a, b, rows):
        rows, rowmap = self._rows(rows)
        a = self._check(a, rows, "tensor_product")
        b = self._check(b, rows, "tensor_product")
        if a.shape != b.shape or a.ndim < 3 or a.shape[0] != 2:
            raise ValueError(f"tensor_product: expected two [2, ..., L, N] operands, got {a.shape} and {b.shape}")
        out = self.xp.empty((3,) + a.shape[1:], dtype=np.uint64)
        batch = _prod(a.shape[1:-2])
        args = (a, b, out, rowmap, self._consts, np.int32(self.num_moduli), np.int32(self.n), np.int32(len(rows)),
                np.int64(batch * len(rows) * self.n))
        self._launch("rns_tensor_product", (-(-self.n // _BLOCK), len(rows), batch), _BLOCK, args)
        return out

    # --- NTT -------------------------------------------------------------------------
    def _groups(self, batch: int, limbs: int) -> list[tuple[int, int, int, int]]:
        """(b0, b1, l0, l1) launch groups of at most ``l2_group_bytes`` (see class doc)."""
        poly = self.n * 8
        total = batch * limbs * poly
        if self.l2_group_bytes <= 0 or total <= self.l2_group_bytes or self.log_n <= self.log_chunk:
            return [(0, batch, 0, limbs)]
        entry = limbs * poly
        if entry <= self.l2_group_bytes:
            step = max(1, self.l2_group_bytes // entry)
            return [(b, min(b + step, batch), 0, limbs) for b in range(0, batch, step)]
        parts = -(-entry // self.l2_group_bytes)
        step = -(-limbs // parts)
        return [(b, b + 1, l0, min(l0 + step, limbs)) for b in range(batch) for l0 in range(0, limbs, step)]

    def _chunk_log(self, count: int) -> int:
        """log2 of the NTT chunk for ``count`` polynomials: the largest chunk (<= 2^12) whose
        chunk-stage grid still fills the GPU, at least 2^10 and at most 4 column stages."""
        lc = min(self.log_n, _CHUNK_LOG)
        low = max(self.log_n - _MAX_COLUMN_STAGES, min(self.log_n, _MIN_CHUNK_LOG))
        while lc > low and (self.n >> lc) * count < self.ntt_fill_blocks:
            lc -= 1
        return lc

    def _use_v4(self, log_chunk: int, count: int) -> bool:
        """Whether ``count`` polynomials in chunks of 2^log_chunk take the ``_v4`` chunk kernels:
        the main kernels' grid would hold fewer threads than the GPU (a latency-bound launch:
        twice the threads per block help) and the chunk is at most 2^FHE_NTT_V4_MAX_LOG_CHUNK
        (default 12, every chunk; 0 turns the ``_v4`` kernels off). Measured on the H200 against
        the main kernels: N=2^14 rotation 93.9 -> 77.6 us, N=2^15 key switch 96 -> 87 us;
        grids that fill the GPU slower (N=2^16 ciphertext NTT 85.4 -> 95.3 us), hence the
        thread count; N=2^16 rescale on NTT values 117.2 -> 112.2 us with 4096-word chunks
        (``perf_notes`` changes 24 and 54)."""
        threads = (count * self.n) >> self._ntt_values_log
        return log_chunk <= self._ntt_v4_max_log_chunk and threads < self._gpu_threads

    def _use_column_x2(self, log_chunk: int, count: int) -> bool:
        """Whether the column kernels of ``count`` polynomials in chunks of 2^log_chunk (2^log_chunk
        columns, log_n - log_chunk column stages: at least 2) take the ``_x2`` forms, two threads
        per column (FHE_NTT_COLUMN_X2: 0 never, 1 always, 2 (default) when one thread per column
        would hold fewer threads than the GPU)."""
        columns = 1 << log_chunk
        if self.log_n - log_chunk < 2 or self._ntt_column_x2 == 0 or (2 * columns) % _COLUMN_BLOCK:
            return False  # (the _x2 launch contract: every block of 64 or 128 lanes full)
        return self._ntt_column_x2 == 1 or count * columns < self._gpu_threads

    def _column_block(self, columns: int, count: int) -> int:
        """Block of the column-stage kernels: 128 threads, 64 when that leaves the GPU underfilled."""
        return _COLUMN_BLOCK if -(-columns // _COLUMN_BLOCK) * count >= self.ntt_fill_blocks else 64

    def _f64_rows(self, rows: tuple[int, ...]) -> bool:
        """Whether every prime of ``rows`` is below 2^45, the bound of the kernels' float64
        arithmetic (``modarith_f64.cuh`` ``F64_MAX_Q``): their transforms may take the ``_f64``
        chunk kernels (``_ntt_launch``)."""
        narrow = self._f64_by_rows.get(rows)
        if narrow is None:  # (a race computes the same value twice: harmless)
            narrow = self._f64_by_rows[rows] = self._ntt_f64_chunk and all(
                self.context.moduli[r] < _F64_MAX_Q for r in rows)
        return narrow

    def _ntt_launch(self, src: Any, dst: Any, rowmap: Any, inverse: bool, src_bs: int, dst_bs: int,
                    batch: int, limbs: int, skip: tuple[Any, int] | None = None,
                    chunk_output: Callable[..., None] | None = None,
                    column_input: Callable[..., None] | None = None, column_stages: bool = True,
                    f64: bool = False) -> None:
        """Transform ``batch x limbs`` polynomials; src/dst are (views of) [batch, limbs, N] storage.

        In one launch group:
          ``skip``: ``(table, skipped)``, the row-skip table of ``ntt.cu`` (``skipped_row``) and
            the fewest rows any entry skips; those rows are left as they are.
          ``chunk_output(suffix, chunk_src, grid, block, shared_mem, base, src_bs)`` (forward
            only): launches a
            kernel in place of ``ntt_forward_chunk_stages`` that writes its own output (the fused
            ModDown combine), with the chunk launch geometry, the ``(num_moduli, log_n,
            log_chunk)`` scalars and the chunk kernels' name suffix (``""`` or ``"_v4"``).
          ``column_input(suffix, grid, block, base, dst, dst_bs)`` (forward, with column stages:
            ``_column_input_fits``): launches a kernel in place of ``ntt_forward_column_stages``
            that computes its own input (``src`` is not read: a division's correction, a
            one-prime ModUp's conversion, a tensor-core ModUp's), with the column launch
            geometry and name suffix (``""`` or ``"_x2"``). The geometry's rows are those the
            chunk kernel transforms (only it reads a row-skip table): a kernel that launches over
            them takes a table that skips no row of some entry, one with its own grid writes
            the skipped rows itself.
          ``column_stages=False`` (inverse, with column stages): only the chunk stages run; the
            caller's next launch finishes the transform (``_inverse_spread_fits``).
          ``f64``: every row's prime is below 2^45 (``_f64_rows``, the caller's check): a plain
            chunk launch of the main form in chunks of 2^11 or 2^12 words, after or before
            column stages (not a whole transform in one chunk), takes the ``_f64`` kernel
            (float64 butterflies only: 32 registers, a full SM of threads, where the main
            kernels take 40 and three quarters).

        A launch group whose main chunk kernel would run fewer threads than the GPU holds
        (2^FHE_LV coefficients a thread) takes the ``_v4`` chunk kernels, 4 coefficients per
        thread (blocks of twice the threads), if its chunk is at most
        2^FHE_NTT_V4_MAX_LOG_CHUNK (default 2^12, every chunk; ``_use_v4``); one
        whose column kernel would (one thread a column) takes the ``_x2`` column kernels, two
        threads a column (``_use_column_x2``)."""
        tw, itw = self._tw()
        w = itw if inverse else tw
        groups = self._groups(batch, limbs)
        if (skip is not None or chunk_output is not None or column_input is not None) and len(groups) != 1:
            raise ValueError("a row-skip table, chunk output or column input needs a transform in one launch group")
        if (chunk_output is not None or column_input is not None) and inverse:
            raise ValueError("chunk output and column input need a forward transform")
        if not column_stages and (not inverse or len(groups) != 1 or self._chunk_log(batch * limbs) == self.log_n):
            raise ValueError("leaving out the column stages needs an inverse transform in one launch group with them")
        skip_table, launched = (np.uint64(0), limbs) if skip is None else (skip[0], limbs - skip[1])
        for b0, b1, l0, l1 in groups:
            g = (b1 - b0, launched if skip is not None else l1 - l0)  # grid: entries, rows
            log_chunk = self._chunk_log(g[0] * g[1])
            chunk = 1 << log_chunk
            v4 = self._use_v4(log_chunk, g[0] * g[1])
            suffix = "_v4" if v4 else ""
            chunk_block = chunk >> (2 if v4 else self._ntt_values_log)
            chunk_smem = (chunk + chunk // 16) * 8
            x2 = self._use_column_x2(log_chunk, g[0] * g[1])
            col_suffix = "_x2" if x2 else ""
            col_threads = chunk << x2
            col_block = self._column_block(col_threads, g[0] * g[1])
            col_grid = (-(-col_threads // col_block), g[1], g[0])
            chunk_grid = (g[0], self.n // chunk, g[1]) if self._ntt_batch_fast else (self.n // chunk, g[1], g[0])
            base = (np.int32(self.num_moduli), np.int32(self.log_n), np.int32(log_chunk))
            if b0 == 0 and l0 == 0:  # same base addresses: skip three CuPy views (host time of every eager call)
                s, d, rm = src, dst, rowmap
            else:
                s, d, rm = src[b0:b1, l0:l1], dst[b0:b1, l0:l1], rowmap[l0:l1]
            strides = (np.int64(src_bs), np.int64(dst_bs))
            same = (np.int64(dst_bs), np.int64(dst_bs))
            single = log_chunk == self.log_n  # one chunk kernel does every stage
            if column_input is not None and single:  # the only group: nothing launched yet
                raise ValueError("column input needs column stages (a transform longer than one chunk)")
            f64_chunk = f64 and not v4 and not single and log_chunk >= _F64_CHUNK_LOG_MIN
            plain = suffix + ("_f64" if f64_chunk else "")
            if inverse:
                self._launch("ntt_inverse_chunk_stages" + plain, chunk_grid, chunk_block,
                             (s, d, rm, self._consts, w, skip_table, *base, *strides), shared_mem=chunk_smem)
                if not single and column_stages:
                    self._launch("ntt_inverse_column_stages" + col_suffix, col_grid, col_block,
                                 (d, d, rm, self._consts, w, skip_table, *base, *same))
                continue
            if column_input is not None:
                column_input(col_suffix, col_grid, col_block, base, d, strides[1])
            elif not single:
                self._launch("ntt_forward_column_stages" + col_suffix, col_grid, col_block,
                             (s, d, rm, self._consts, w, skip_table, *base, *strides))
            chunk_src, chunk_strides = (s, strides) if single else (d, same)
            if chunk_output is not None:
                chunk_output(suffix, chunk_src, chunk_grid, chunk_block, chunk_smem, base, chunk_strides[0])
            else:
                self._launch("ntt_forward_chunk_stages" + plain, chunk_grid, chunk_block,
                             (chunk_src, d, rm, self._consts, w, skip_table, *base, *chunk_strides),
                             shared_mem=chunk_smem)

    def _column_input_fits(self, batch: int, limbs: int, skipped: int = 0) -> bool:
        """Whether a forward transform of ``batch x limbs`` polynomials is one launch group with
        column stages (the condition of ``_ntt_launch``'s ``column_input``), its chunk chosen as
        ``_ntt_launch`` chooses it: for the rows a row-skip table leaves (``skipped`` fewer)."""
        return len(self._groups(batch, limbs)) == 1 and self._chunk_log(batch * (limbs - skipped)) < self.log_n

    def _inverse_spread_fits(self, entries: int, targets: int) -> bool:
        """Whether a one-prime division of ``entries`` polynomials into ``targets`` rows whose
        correction's column input fits (``_column_input_fits``, the caller's check) can leave
        the inverse NTT of its divided-out row (``entries x 1``) to that input
        (``ntt_inverse_column_stages_rescale_spread_x2``): it takes the ``_x2`` column form (a launch too small to fill the GPU: every target row
        redoes the row's inverse column stages) and has the inverse transform's chunk. By default
        (FHE_INVERSE_SPREAD=2) also at most a quarter of the GPU's threads, where that extra work
        hides in the launch's latency. Measured on the H200 at N=2^14 (2026-11-30, s15): one
        key's NTT-output ModDown (16 rows, 33 K threads) 1.5-2 us faster, seven keys' (112 rows,
        229 K threads) 5 us slower."""
        if not self._inverse_spread:
            return False
        count = entries * targets
        log_chunk = self._chunk_log(count)
        if self._chunk_log(entries) != log_chunk or not self._use_column_x2(log_chunk, count):
            return False
        return self._inverse_spread == 1 or 4 * count * (2 << log_chunk) <= self._gpu_threads

    def _ntt(self, a: Any, rows: Sequence[int], out: Any, inverse: bool) -> Any:
        what = "ntt_inverse" if inverse else "ntt_forward"
        rows, rowmap = self._rows(rows)
        a = self._check(a, rows, what)
        out = self._out(out, tuple(a.shape), what)
        batch, limbs = _prod(a.shape[:-2]), len(rows)
        shape3 = (batch, limbs, self.n)
        self._ntt_launch(a.reshape(shape3), out.reshape(shape3), rowmap, inverse, limbs * self.n, limbs * self.n,
                         batch, limbs, f64=self._f64_rows(rows))
        return out

    def ntt_forward(self, a, rows, *, out=None):
        return self._ntt(a, rows, out, inverse=False)

    def ntt_inverse(self, a, rows, *, out=None):
        return self._ntt(a, rows, out, inverse=True)

    # --- automorphism ----------------------------------------------------------------
    def _galois(self, galois_element: int, domain: str) -> Any:
        g = int(galois_element) % (2 * self.n)
        if g % 2 == 0:
            raise ValueError(f"galois element must be odd, got {galois_element}")
        check_domain(domain, "automorphism")
        if domain == "ntt":
            return self._cached(("perm", g), lambda: self._upload(ntt_automorphism_permutation(self.n, g)))
        return self._cached(("coef", g), lambda: self._upload(coefficient_automorphism_map(self.n, g)))

    def automorphism(self, a, galois_element, rows, *, domain: Domain):
        rows, rowmap = self._rows(rows)
        table = self._galois(galois_element, domain)
        a = self._check(a, rows, "automorphism")
        return self._automorphism_launch(a, table, rows, rowmap, domain)

    def _automorphism_launch(self, a: Any, table: Any, rows: tuple[int, ...], rowmap: Any, domain: Domain) -> Any:
        """``automorphism`` of an ``a`` checked for ``rows`` with its ``_galois`` table (``rowmap``:
        ``_rows(rows)``'s): one launch into new storage, nothing checked again."""
        out = self.xp.empty_like(a)
        plane = np.int64(len(rows) * self.n)
        grid = (-(-self.n // _BLOCK), len(rows), _prod(a.shape[:-2]))
        if domain == "ntt":
            self._launch("automorphism_ntt_permute", grid, _BLOCK, (a, out, table, np.int32(self.n), plane, plane))
        else:
            self._launch("automorphism_coefficient_signed", grid, _BLOCK,
                         (a, out, table, rowmap, self._consts, np.int32(self.num_moduli), np.int32(self.n), plane,
                          plane))
        return out

    # --- rescale ---------------------------------------------------------------------
    def rescale(self, a, rows, *, domain: Domain):
        rows, _ = self._rows(rows)
        if len(rows) < 2:
            raise ValueError("rescale needs at least two limbs")
        check_domain(domain, "rescale")
        a = self._check(a, rows, "rescale")
        rest, rest_map = self._rows(rows[1:])
        head, head_map = self._rows(rows[:1])
        tab = self._cached(("rescale", rows), lambda: self._upload(rescale_table(self.context, rows)))
        L, n = len(rows), self.n
        batch = _prod(a.shape[:-2])
        out = self.xp.empty(a.shape[:-2] + (L - 1, n), dtype=np.uint64)
        grid = (-(-n // _BLOCK), L - 1, batch)
        base = (self._consts, tab, np.int32(self.num_moduli), np.int32(n))
        if domain == "coefficient":
            self._launch("rescale_drop_first_coefficient", grid, _BLOCK,
                         (a, out, rest_map, *base, np.int32(L - 1), np.int32(rows[0]), np.int64(L * n),
                          np.int64((L - 1) * n)))
            return out
        a3 = a.reshape(batch, L, n)
        c0 = self.xp.empty((batch, 1, n), dtype=np.uint64)
        spread = self._one_prime_division(a3[:, 0:1], c0, head_map, L * n, n, batch, L - 1, rest_map, tab, rows[0])
        if spread is None:
            self._launch("rescale_spread_dropped", grid, _BLOCK,
                         (c0, out, rest_map, *base, np.int32(rows[0]), np.int64(n), np.int64((L - 1) * n)))
        # (a - NTT(r)) * q0^-1: the division's combine with one divided-out row, K = 1, so x's
        # entry stride is (L - 1 + 1) rows = a's (the rescale table has the combine's layout);
        # entries = batch plain polynomials (ent and comp always 0: out_es, out_cs unused)
        self._ntt_combine(a3[:, 1:], out, out, rest_map, tab, L - 1, 1, batch, batch, 0, 0, column_input=spread)
        return out

    # --- key switching ---------------------------------------------------------------
    def _keyswitch_device(self, rows: tuple[int, ...]) -> dict[str, Any]:
        """ModUp and ModDown tables of ``rows`` on the device (cached per rows tuple)."""
        def build() -> dict[str, Any]:
            up = modup_tables(self.context, rows)
            down = moddown_tables(self.context, rows, pieces=self._weight_pieces)
            spread = modup_spread_table(self.context, up["groups"], rows, up["out_rows"])
            return {
                "out_rows": up["out_rows"],
                "out_map": self._rows(up["out_rows"])[1],
                "key_digits": self._upload(up["key_digits"]),
                "num_digits": len(up["key_digits"]),
                "key_digits_needed": int(up["key_digits"].max()) + 1,  # digits a key must hold
                "own_rows": up["own_rows"],
                "groups": up["groups"],
                "up": (self._upload(up["convert"]), up["convert_size"]),
                "up_bytes": (up_bytes := self._byte_table(up, rows)),
                "up_bytes_columns_smem": self._bytes_columns_smem(up_bytes),
                "up_spread": None if spread is None else self._upload(spread),
                "down": (self._upload(down["convert"]), down["convert_size"]),
                "pinv": self._upload(down["pinv"]),
            }

        return self._cached(("keyswitch", rows), build)

    def _byte_table(self, up: dict[str, Any], rows: tuple[int, ...]) -> tuple[Any, np.int32, int] | None:
        """``keyswitch_base_convert_bytes_mma``'s table of a ModUp (uploaded), its target groups and
        its launch's shared memory (one group block), or None when the ModUp takes
        ``keyswitch_base_convert_s*``: groups smaller than ``FHE_BC_BYTES_MIN_SOURCES`` (default
        6), sources of 48 bits or more, more than 56 targets, or no sm_80."""
        if not 0 < self._bytes_min_sources <= up["convert_size"] or not byte_table_fits(self.context, up["groups"]):
            return None
        words, target_groups = modup_byte_table(self.context, up["groups"], rows, up["out_rows"])
        smem = byte_group_words(target_groups) * 8
        if smem > _MAX_STATIC_SMEM:  # more than 56 targets: a group's block misses
            return None
        return self._upload(words), np.int32(target_groups), smem

    def _base_convert_bytes(self, src: Any, out: Any, table: tuple[Any, np.int32, int], groups: int, batch: int,
                            in_bs: int, out_bs: int, src_self: Any = None) -> None:
        """``keyswitch_base_convert_bytes_mma``: the ModUp conversion of ``_base_convert`` on
        tensor cores (every output row of ``out``: the group's own rows copied, from ``src_self``
        when given). ``table``: ``_byte_table``'s."""
        words, target_groups, smem = table
        self._launch("keyswitch_base_convert_bytes_mma", (-(-self.n // self._bytes_coeffs), 1, groups * batch), 256,
                     (src, np.uint64(0) if src_self is None else src_self, out, words, target_groups,
                      np.int32(self.n), np.int32(batch), np.int64(in_bs), np.int64(out_bs)), shared_mem=smem)

    def _bytes_columns_smem(self, up_bytes: tuple[Any, np.int32, int] | None) -> int | None:
        """Dynamic shared memory of ``keyswitch_base_convert_bytes_mma_columns`` for a ModUp
        whose tensor-core table is ``up_bytes`` (``_byte_table``'s): its table block and its
        8 target slots, the kernel's limit raised to it (``_opt_in_shared_memory``;
        called by a table build, outside any capture); None when there is no such table,
        FHE_BYTES_COLUMNS=0, or the device's opt-in limit is smaller."""
        if up_bytes is None or not self._bytes_columns:
            return None
        smem = up_bytes[2] + 8 * _BYTES_COLUMN_SLOT * 8
        if smem > self._smem_optin:
            return None
        self._opt_in_shared_memory("keyswitch_base_convert_bytes_mma_columns", smem)
        return smem

    def _opt_in_shared_memory(self, name: str, smem: int) -> None:
        """Let kernel ``name`` launch with ``smem`` bytes of dynamic shared memory: past 48 KiB
        a kernel needs its ``max_dynamic_shared_size_bytes`` attribute raised first (a driver
        call, kept out of captures by the callers); never lowered."""
        if smem <= _MAX_STATIC_SMEM:
            return
        function = self._library.function(name)
        with self._device:  # (the attribute of the kernel as loaded on this backend's device)
            if int(function.max_dynamic_shared_size_bytes) < smem:
                function.max_dynamic_shared_size_bytes = smem

    def _bytes_columns_fit(self, t: dict[str, Any], entries: int, skip: tuple[Any, int] | None) -> bool:
        """Whether a ModUp of ``entries`` groups x batch entries (``t``: ``_keyswitch_device``'s)
        converts on tensor cores and runs its forward NTT's column stages in the same kernel
        (``keyswitch_base_convert_bytes_mma_columns``): its shared memory granted
        (``_bytes_columns_smem``) and one launch group with column stages, as ``_ntt_launch``
        will choose them (``skip`` rows left out)."""
        return t["up_bytes_columns_smem"] is not None and self._column_input_fits(
            entries, len(t["out_rows"]), skip[1] if skip is not None else 0)

    def _base_convert_bytes_columns(self, src: Any, out: Any, t: dict[str, Any], groups: int, batch: int,
                                    in_bs: int, out_bs: int, src_self: Any, base: tuple) -> None:
        """``keyswitch_base_convert_bytes_mma_columns``: ``_base_convert_bytes`` into ``out``
        followed by the first ``log_n - log_chunk`` forward NTT stages of every row (``base``:
        the ``_ntt_launch`` scalars ``(num_moduli, log_n, log_chunk)`` of the chunk launch that
        finishes the transform); the own rows copied from ``src_self`` when given (the chunk
        kernel's row-skip table leaves them), else transformed like the others."""
        words, target_groups, _ = t["up_bytes"]
        log_chunk = int(base[2])
        width = 256 >> (self.log_n - log_chunk)  # columns a block
        tw, _ = self._tw()
        self._launch("keyswitch_base_convert_bytes_mma_columns",
                     ((1 << log_chunk) // width, 1, groups * batch), 256,
                     (src, np.uint64(0) if src_self is None else src_self, out, words, target_groups,
                      np.int32(self.n), np.int32(batch), np.int64(in_bs), np.int64(out_bs), t["out_map"],
                      self._consts, tw, *base), shared_mem=t["up_bytes_columns_smem"])

    def _base_convert(self, src: Any, out: Any, table: tuple[Any, int], targets: int, groups: int, batch: int,
                      in_bs: int, out_bs: int, src_self: Any = None) -> None:
        """``keyswitch_base_convert_s*``: ``groups x batch`` conversions of ``src`` rows into
        ``targets`` rows of ``out`` (layouts in keyswitch.cu); targets that are sources of their
        group copy ``src_self`` (same layout as ``src``) instead when given."""
        words, size = table
        smem = self._convert_smem(size, targets)
        tile = self._convert_tile(targets)
        self._launch(_base_convert_kernel(size), (-(-self.n // _BLOCK), -(-targets // tile), groups * batch), _BLOCK,
                     (src, np.uint64(0) if src_self is None else src_self, out, words, np.int32(size),
                      np.int32(targets), np.int32(tile), np.int32(self.n),
                      np.int32(batch), np.int64(in_bs), np.int64(out_bs)), shared_mem=smem)

    @staticmethod
    def _convert_smem(size: int, targets: int) -> int:
        """Dynamic shared memory of a base conversion (``keyswitch.cu``: one group's table and
        the targets' constants); ValueError past the per-block limit."""
        smem = ((size * targets + 2 * targets + 4 * size + 1) + 3 * targets) * 8
        if smem > _MAX_STATIC_SMEM:
            raise ValueError(
                f"base conversion of {size} into {targets} primes needs {smem} bytes of shared memory "
                f"(> {_MAX_STATIC_SMEM}); use more key-switching digits (dnum) or fewer primes"
            )
        return smem

    def _convert_tile(self, targets: int) -> int:
        """Targets a thread of a base conversion covers (grid y = ceil(targets / tile))."""
        return self.base_convert_tile if self.base_convert_tile > 0 else targets

    def modup(self, c, rows, *, c_ntt=None):
        """See ``CkksBackend.modup``. With ``c_ntt`` each digit's own rows are copied from it,
        already transformed, and the forward NTT skips them (``ntt.cu`` row-skip table): at
        N=2^16 with 4 digits, 126 instead of 160 limb transforms.

        Digits converted on tensor cores (``_byte_table``) run the transform's column stages in
        the conversion kernel when it has them (``keyswitch_base_convert_bytes_mma_columns``, one
        launch group): 2 launches instead of 3.

        When every digit is one prime (the N=2^14 preset) and the transform is one launch group
        with column stages, the NTT's column kernel computes the conversion as it loads
        (``ntt_forward_column_stages_modup_spread``: centered(c_d, q_d) mod q_t) and ``c_ntt``
        is not read: 2 launches instead of 3, and every row, the digit's own included, is
        transformed."""
        rows, _ = self._rows(rows)
        if any(r >= self.context.q_count for r in rows):
            raise ValueError(f"modup: rows {rows} must be Q prime ids")
        c = self._check(c, rows, "modup")
        if c_ntt is not None:
            c_ntt = self._check(c_ntt, rows, "modup")
            if c_ntt.shape != c.shape:
                raise ValueError(f"modup: c_ntt {tuple(c_ntt.shape)} must have c's shape {tuple(c.shape)}")
        t = self._keyswitch_device(rows)
        L, n = len(rows), self.n
        R, D = len(t["out_rows"]), t["num_digits"]
        batch_shape = tuple(c.shape[:-2])
        batch = _prod(batch_shape)
        if self._spread_fits(t, D * batch):
            out = self.xp.empty((D,) + batch_shape + (R, n), dtype=np.uint64)
            self._modup_spread(c, out.reshape(D * batch, R, n), t, t["up_spread"], batch, 0, L * n)
            return out
        skip = None
        if c_ntt is not None and t["own_rows"] is not None and len(self._groups(D * batch, R)) == 1:
            own = t["own_rows"]
            skip = (self._skip_table(own, batch, R), min(count for _, count in own))
        out = self.xp.empty((D,) + batch_shape + (R, n), dtype=np.uint64)
        out3 = out.reshape(D * batch, R, n)
        src_self = c_ntt if skip else None
        if self._bytes_columns_fit(t, D * batch, skip):
            def columns(_suffix: str, _grid: Any, _block: int, base: tuple, dst: Any, dst_bs: int) -> None:
                self._base_convert_bytes_columns(c, dst, t, D, batch, L * n, dst_bs, src_self, base)

            self._ntt_launch(out3, out3, t["out_map"], False, R * n, R * n, D * batch, R, skip=skip,
                             column_input=columns)
            return out
        if t["up_bytes"] is not None:
            self._base_convert_bytes(c, out, t["up_bytes"], D, batch, L * n, R * n, src_self=src_self)
        else:
            self._base_convert(c, out, t["up"], R, D, batch, L * n, R * n, src_self=src_self)
        self._ntt_launch(out3, out3, t["out_map"], False, R * n, R * n, D * batch, R, skip=skip)
        return out

    def ntt_forward_and_modup(self, c, rows, *, components=(0, 1)):
        """See ``CkksBackend.ntt_forward_and_modup``. When every digit is one prime (the N=2^14
        preset), ``c`` is unbatched and everything fits one launch group, one forward NTT does
        both: its column kernel (``ntt_forward_column_stages_modup_spread``) reads the digits'
        conversions and the components' own rows, its chunk kernel skips the rows past them,
        and the returned NTT is a view of that storage (rows contiguous, components ``L + K``
        rows apart): 2 launches instead of 4. Otherwise the two calls
        (``ntt_forward_and_modup_by_calls``)."""
        op = "ntt_forward_and_modup"
        rows, _ = self._rows(rows)
        components = check_ntt_components(c, components, op)
        if any(r >= self.context.q_count for r in rows):
            raise ValueError(f"{op}: rows {rows} must be Q prime ids")
        c = self._check(c, rows, op)
        t = self._keyswitch_device(rows)
        L, n = len(rows), self.n
        R, D, G = len(t["out_rows"]), t["num_digits"], t["num_digits"] + len(components)
        if c.ndim != 3 or not self._spread_fits(t, G):
            return ntt_forward_and_modup_by_calls(self, c, rows, components)
        table, skip = self._cached(("modup_spread_ntt", rows, components), lambda: (
            self._upload(modup_spread_table(self.context, t["groups"], rows, t["out_rows"], source=1,
                                            components=components)),
            self._upload(ntt_row_skip_table([(R, 0)] * D + [(L, R - L)] * len(components), 1, R))))
        out = self.xp.empty((G, R, n), dtype=np.uint64)
        self._modup_spread(c, out, t, table, 1, L * n, L * n, skip=(skip, 0))
        return out[D:, :L], out[:D]

    def _spread_fits(self, t: dict[str, Any], entries: int) -> bool:
        """Whether a ModUp of ``entries`` groups x batch entries (``t``: ``_keyswitch_device``'s)
        takes ``_modup_spread``: one-prime digits, no tensor-core conversion asked for, one
        launch group with column stages."""
        return t["up_bytes"] is None and t["up_spread"] is not None and self._column_input_fits(entries, len(t["out_rows"]))

    def _modup_spread(self, c: Any, out3: Any, t: dict[str, Any], table: Any, batch: int, c_cs: int, c_bs: int,
                      skip: tuple[Any, int] | None = None, chunk_output: Callable[..., None] | None = None) -> None:
        """The forward NTT of ``out3 [G * batch, R, N]`` whose column kernel computes its input
        from ``c`` (``ntt_forward_column_stages_modup_spread`` with ``table``: the one-prime
        digits' conversions, and any component groups; ``c_cs``, ``c_bs``: ``c``'s component and
        entry strides): ``modup``'s and ``ntt_forward_and_modup``'s one pass."""
        R, n = len(t["out_rows"]), self.n
        tw, _ = self._tw()

        def spread(suffix: str, col_grid: tuple, block: int, ntt_base: tuple, dst: Any, dst_bs: Any) -> None:
            self._launch("ntt_forward_column_stages_modup_spread" + suffix, col_grid, block,
                         (c, dst, t["out_map"], self._consts, tw, table, *ntt_base, np.int32(batch), np.int32(R),
                          np.int64(c_cs), np.int64(c_bs), dst_bs))

        self._ntt_launch(out3, out3, t["out_map"], False, R * n, R * n, out3.shape[0], R, skip=skip,
                         column_input=spread, chunk_output=chunk_output)

    def rotate_keyswitch(self, c, key, rows, galois_element, *, c0=None, domain="coefficient", out=None,
                         before_c0=None):
        """``keyswitch_from_digits_many(modup(c), [key], rows, [galois_element], c0=c0,
        domain=domain, out=out)`` bit for bit, where every digit is one prime and ``c`` (the
        coefficient-domain c1 of a rotation, ``[L, N]``) is unbatched; ``None``, with nothing
        launched, elsewhere (the caller takes the two calls).

        The Galois automorphism goes first, on ``c`` (``automorphism`` in the coefficient domain:
        for one-prime digits ModUp(sigma(c)) = sigma(ModUp(c)) exactly), then the ModUp's column
        kernel (``ntt_forward_column_stages_modup_spread``), then one kernel that runs every
        digit's chunk stages and sums them against the key as they leave the transform
        (``ntt_forward_chunk_stages_key_inner_product``): the digits' NTT values are never
        stored and the key is read in order. ``before_c0()``, when given, is called after the
        inner product is enqueued and before anything that reads ``c0`` (a branch's wait for
        another branch's ``c0``). Stream: the current one; no host synchronization."""
        rows, rowmap = self._rows(rows)
        if c.ndim != 2 or any(r >= self.context.q_count for r in rows):
            return None
        t = self._keyswitch_device(rows)
        L, n, R, D = len(rows), self.n, len(t["out_rows"]), t["num_digits"]
        chunk = 1 << self._chunk_log(D * R)
        smem = (chunk + chunk // 16) * 8
        if (not self._spread_fits(t, D) or D * R > _MAX_GRID_YZ or chunk > 4 * self._kip_threads
                or smem > _MAX_STATIC_SMEM):
            return None  # (a chunk too large for the build's fused kernel: its blocks or shared memory)
        check_domain(domain, "rotate_keyswitch")
        c = self._check(c, rows, "rotate_keyswitch")
        g = int(galois_element) % (2 * n)
        table = self._galois(g, "coefficient")  # (checks g: odd, before _many_tables caches anything for it)
        if c0 is not None:
            c0 = self._check(c0, rows, "rotate_keyswitch")
            if c0.ndim != 2:
                raise ValueError(f"rotate_keyswitch: c0 must be [L, N] like c, got {tuple(c0.shape)}")
        out_strides = self._many_out(out, (1, 2, L, n))
        (key,), key_rows = self._checked_keys([key], rows, t, "rotate_keyswitch")
        _, perms = self._many_tables([key], [g])  # keeps the key alive for a capture
        rotated = self._automorphism_launch(c, table, rows, rowmap, "coefficient")  # (c, g checked above)
        acc = self.xp.empty((1, 2, 1, R, n), dtype=np.uint64)
        tw, _ = self._tw()

        def inner_product(suffix: str, src: Any, grid: tuple, block: int, smem: int, base: tuple, src_bs: Any) -> None:
            chunk = 1 << int(base[2])
            self._launch("ntt_forward_chunk_stages_key_inner_product", (n // chunk, R, 1), chunk // 4,
                         (src, key, acc, t["out_map"], self._consts, tw, t["key_digits"], *base, np.int32(D),
                          np.int32(key_rows), src_bs), shared_mem=smem)

        column_output = self.xp.empty((D, R, n), dtype=np.uint64)
        self._modup_spread(rotated, column_output, t, t["up_spread"], 1, 0, L * n, chunk_output=inner_product)
        if before_c0 is not None:
            before_c0()
        return self._moddown_many(acc, perms, t, rows, [g], (), c0, domain, out, out_strides)

    def _one_prime_division(self, row: Any, c0: Any, row_map: Any, row_bs: int, c0_bs: int, entries: int,
                            targets: int, rowmap: Any, table: Any, dropped_id: int) -> Callable[..., None] | None:
        """The divided-out row's part of a rounding division by the one prime ``dropped_id``
        (the NTT-domain rescale, a ModDown by one special prime): its inverse NTT, ``row
        [entries, 1, N]`` (``row_map``, ``row_bs``) into ``c0`` (``c0_bs``; may be ``row``), and
        the ``column_input`` of the correction's forward NTT into ``targets`` rows (``rowmap``;
        ``table``: the division's, ``q0 mod q`` first), which computes centered(c0, q0) mod q as
        it loads (``ntt_forward_column_stages_rescale_spread``). Where ``_inverse_spread_fits``
        only the inverse chunk stages run here and that input finishes the transform
        (``ntt_inverse_column_stages_rescale_spread_x2``). None where the input does not fit
        (``c0`` then holds the whole inverse NTT, for a conversion launch)."""
        fits = self._column_input_fits(entries, targets)
        fused = fits and self._inverse_spread_fits(entries, targets)
        self._ntt_launch(row, c0, row_map, True, row_bs, c0_bs, entries, 1, column_stages=not fused)
        if not fits:
            return None
        tw, itw = self._tw()

        def spread(suffix: str, col_grid: tuple, block: int, ntt_base: tuple, dst: Any, dst_bs: Any) -> None:
            tail = (table, *ntt_base, np.int32(dropped_id), np.int64(c0_bs), dst_bs)
            if not fused:
                self._launch("ntt_forward_column_stages_rescale_spread" + suffix, col_grid, block,
                             (c0, dst, rowmap, self._consts, tw, *tail))
            elif suffix == "_x2":
                self._launch("ntt_inverse_column_stages_rescale_spread_x2", col_grid, block,
                             (c0, dst, rowmap, self._consts, tw, itw, *tail))
            else:
                raise ValueError("the inverse NTT's column stages fold into the _x2 column input only")

        return spread

    def _skip_table(self, skipped: Sequence[tuple[int, int]], batch: int, rows: int) -> Any:
        """The ``ntt.cu`` row-skip table (``skipped_row``) of ``[len(skipped), batch, rows, N]``
        entries: entry ``d * batch + b`` passes over rows ``(start, count) = skipped[d]``."""
        return self._cached(("row_skip", tuple(skipped), batch, rows),
                            lambda: self._upload(ntt_row_skip_table(skipped, batch, rows)))

    def _ks_inputs(self, digits_ntt: Any, keys: Sequence[Any], rows: Sequence[int], what: str) -> tuple:
        rows, rowmap = self._rows(rows)
        t = self._keyswitch_device(rows)
        R, D, n = len(t["out_rows"]), t["num_digits"], self.n
        digits = digits_ntt if digits_ntt.flags.c_contiguous else self.xp.ascontiguousarray(digits_ntt)
        if digits.dtype != np.uint64 or digits.ndim < 3 or digits.shape[0] != D or digits.shape[-2:] != (R, n):
            raise ValueError(f"{what}: expected digits [{D}, ..., {R}, {n}], got {digits.shape}")
        checked, key_rows = self._checked_keys(keys, rows, t, what)
        return rows, t, digits, checked, key_rows

    def _checked_keys(self, keys: Sequence[Any], rows: tuple[int, ...], t: dict[str, Any],
                      what: str) -> tuple[list[Any], int]:
        """Key-switching keys of ``rows`` (``t``: their ``_keyswitch_device`` tables) checked,
        each ``[dnum, 2, key_rows, N]`` uint64 with the digits ``rows`` need, and made
        C-contiguous (the kernels read them by address); returns them and ``key_rows``."""
        key_rows, n, needed = self.context.q_count + self.context.p_count, self.n, t["key_digits_needed"]
        for key in keys:
            if key.dtype != np.uint64 or key.ndim != 4 or key.shape[1:] != (2, key_rows, n):
                raise ValueError(f"{what}: expected key [dnum, 2, {key_rows}, {n}], got {key.shape}")
            if key.shape[0] < needed:
                raise ValueError(f"{what}: key has {key.shape[0]} digits, rows {rows} need {needed}")
        return [self._c_aligned(key) for key in keys], key_rows

    def _moddown_launch(self, acc: Any, out: Any, t: dict[str, Any], L: int, entries: int, domain: str,
                        batch: int = 1, c0: Any = None, perms: Any = None,
                        out_strides: tuple[int, int] | None = None, beside: Callable[[], None] | None = None) -> None:
        """Rounding ModDown of the NTT-domain inner product ``acc [entries, R, N]`` into
        ``out`` in ``domain``; ``acc`` is overwritten (inverse NTT in place).

        Coefficient output: inverse NTT of all R rows, then the base conversion of the P rows
        and the combine in one launch (``keyswitch_moddown_convert_combine_s*``). NTT output:
        inverse NTT of the K P rows only (the Q rows never leave the NTT domain: K + L instead of
        2L + K limb transforms), base conversion, its forward NTT and
        ``keyswitch_moddown_combine`` (+ ``c0[perm]`` for component 0 when ``c0`` is given; NTT
        output only); in one launch group the combine is the output step of the NTT's chunk
        kernel (``ntt_forward_chunk_stages_moddown_combine``: one launch and a store and reload
        of NTT(e) fewer). Entries are ordered ``[E, 2, batch]``; ``out`` is ``[entries, L, N]``
        contiguous, or with ``out_strides = (entry, component)`` element strides any layout
        whose ``[batch, L, N]`` blocks are contiguous.

        ``beside`` (taken where NTT output and K > 1: ``_overlaps_moddown``; elsewhere it just
        runs first): launches on the caller's stream
        that run while a side stream takes the P rows through their inverse NTT and base
        conversion (a key switch's Q-row inner product, which must not touch the P rows or
        ``out``); the caller's stream joins the side stream before the forward NTT and combine.
        Everything either stream touches is allocated before the fork and referenced by the
        caller until this returns; in a capture the side stream joins through the fork event."""
        if c0 is not None and domain != "ntt":
            raise ValueError("ModDown: the rotated c0 is added on NTT output only")
        R, n, K = len(t["out_rows"]), self.n, len(self.p_rows)
        acc3 = acc.reshape(entries, R, n)
        plane = batch * L * n
        out_es, out_cs = (2 * plane, plane) if out_strides is None else out_strides
        if beside is not None and (domain == "coefficient" or K == 1):
            beside()  # no P-row work of its own to overlap with: in turn
            beside = None
        if domain == "coefficient":
            self._ntt_launch(acc3, acc3, t["out_map"], True, R * n, R * n, entries, R)
            self._convert_combine(acc3, acc3, out, t["down"], t["pinv"], L, entries, batch, R * n, out_es, out_cs)
            return
        e = out if out_strides is None else self.xp.empty((entries, L, n), dtype=np.uint64)
        spread = None
        if K == 1:  # a division by one prime: the conversion in the NTT's column kernel where it fits
            p_row = acc3[:, L:]
            spread = self._one_prime_division(p_row, p_row, t["out_map"][L:], R * n, R * n, entries, L,
                                              t["out_map"], t["pinv"], self.p_rows[0])
            if spread is None:
                self._base_convert(acc, e, t["down"], L, 1, entries, R * n, L * n)
        elif beside is None:
            self._p_rows_converted(acc, e, t, L, entries)
        else:
            side, fork, join = self._moddown_stream()
            main = self.xp.cuda.get_current_stream()
            fork.record(main)
            side.wait_event(fork)
            try:
                with side:
                    self._p_rows_converted(acc, e, t, L, entries)
                beside()
            finally:
                join.record(side)
                main.wait_event(join)
        self._ntt_combine(acc, e, out, t["out_map"], t["pinv"], L, K, entries, batch, out_es, out_cs, c0, perms,
                          column_input=spread)

    def _p_rows_converted(self, acc: Any, e: Any, t: dict[str, Any], L: int, entries: int) -> None:
        """A ModDown's inverse NTT of the P rows of ``acc [entries, R, N]`` (in place) and their
        base conversion into the L Q rows of ``e`` (no P row is a Q row)."""
        R, n, K = len(t["out_rows"]), self.n, len(self.p_rows)
        acc3 = acc.reshape(entries, R, n)
        self._ntt_launch(acc3[:, L:], acc3[:, L:], t["out_map"][L:], True, R * n, R * n, entries, K)
        self._base_convert(acc, e, t["down"], L, 1, entries, R * n, L * n)

    def _convert_combine(self, src: Any, x: Any, out: Any, table: tuple[Any, int], pinv: Any, targets: int,
                         entries: int, batch: int, entry_stride: int, out_es: int, out_cs: int) -> None:
        """``keyswitch_moddown_convert_combine_s*``: a coefficient-domain rounding division's
        base conversion (of each entry's divided-out rows of ``src``, one group) and combine
        ``out = (x - conversion) * D^-1`` in one launch. ``x`` (a view of ``src`` at its first
        kept row) and ``src`` have ``entry_stride`` elements an entry; ``out`` as
        ``_combine_launch``'s."""
        words, size = table
        tile = self._convert_tile(targets)
        name = _base_convert_kernel(size, "keyswitch_moddown_convert_combine", _CONVERT_COMBINE_SIZES)
        self._launch(name, (-(-self.n // _BLOCK), -(-targets // tile), entries), _BLOCK,
                     (src, x, out, words, pinv, np.int32(size), np.int32(targets), np.int32(tile), np.int32(self.n),
                      np.int32(batch), np.int64(entry_stride), np.int64(entry_stride), np.int64(out_es),
                      np.int64(out_cs)), shared_mem=self._convert_smem(size, targets))

    def _ntt_combine(self, x: Any, e: Any, out: Any, rowmap: Any, pinv: Any, L: int, K: int, entries: int,
                     batch: int, out_es: int, out_cs: int, c0: Any = None, perms: Any = None,
                     column_input: Callable[..., None] | None = None) -> None:
        """``_combine_launch`` on NTT values: ``out = (x - NTT(e)) * D^-1`` with ``e [entries, L,
        N]`` contiguous in the coefficient domain (scratch: the transform works in place; ``out``
        may be ``e``). ``rowmap`` may run past the L kept rows (the launches read its first L).
        In one launch group the combine is the output step of the NTT's chunk kernel
        (``ntt_forward_chunk_stages_moddown_combine``: NTT(e) is never stored). ``column_input``:
        ``e`` is computed by the NTT's column kernel (``_ntt_launch``), not read."""
        n = self.n
        e3 = e.reshape(entries, L, n)
        if self._fused_combine and len(self._groups(entries, L)) == 1:
            tw, _ = self._tw()
            null = np.uint64(0)

            def combine(suffix: str, src: Any, grid: tuple, block: int, smem: int, base: tuple, src_bs: Any) -> None:
                self._launch("ntt_forward_chunk_stages_moddown_combine" + suffix, grid, block,
                             (src, x, out, rowmap, self._consts, tw, pinv, null if c0 is None else c0,
                              null if perms is None else perms, *base, np.int32(L), np.int32(batch), src_bs,
                              np.int64((L + K) * n), np.int64(out_es), np.int64(out_cs)), shared_mem=smem)

            self._ntt_launch(e3, e3, rowmap, False, L * n, L * n, entries, L, chunk_output=combine,
                             column_input=column_input)
            return
        self._ntt_launch(e3, e3, rowmap, False, L * n, L * n, entries, L, column_input=column_input)
        self._combine_launch(x, e, out, rowmap, pinv, L, K, entries, batch, out_es, out_cs, c0, perms)

    def _combine_launch(self, x: Any, e: Any, out: Any, rowmap: Any, pinv: Any, L: int, K: int, entries: int,
                        batch: int, out_es: int, out_cs: int, c0: Any = None, perms: Any = None) -> None:
        """``keyswitch_moddown_combine``: ``out = (x - e) * D^-1`` over the L kept rows (``rowmap``,
        ``pinv`` of the division by ``D``); ``x`` has L + K rows per entry, the K divided-out
        ones last (a view may start past rows divided out before them)."""
        null = np.uint64(0)
        self._launch("keyswitch_moddown_combine", (-(-self.n // _BLOCK), L, entries), _BLOCK,
                     (x, e, out, rowmap, self._consts, pinv, null if c0 is None else c0,
                      null if perms is None else perms, np.int32(self.num_moduli), np.int32(self.n), np.int32(L),
                      np.int32(K), np.int32(batch), np.int64(out_es), np.int64(out_cs)))

    def keyswitch_from_digits(self, digits_ntt, key, rows, *, galois_element=None, domain="coefficient"):
        """One key switch: ``keyswitch_from_digits_many`` with a single (key, Galois element)
        (one inner-product kernel serves both)."""
        check_domain(domain, "keyswitch_from_digits")
        batch = _prod(digits_ntt.shape[1:-2])
        if 2 * batch > _MAX_GRID_YZ:
            raise ValueError(f"keyswitch_from_digits: {batch} batch entries exceed the ModDown grid's limit "
                             f"of {_MAX_GRID_YZ // 2}")
        return self.keyswitch_from_digits_many(digits_ntt, [key], rows, [galois_element], domain=domain)[0]

    def _many_tables(self, keys: Sequence[Any], galois_elements: Sequence[int | None]) -> tuple[Any, Any]:
        """Device tables of one (keys, Galois elements) tuple: key addresses [E] and
        permutations [E, N] (int32), cached by the addresses and elements themselves.

        The cache does not hold the keys: an address table is right for whatever key lives at
        those addresses when a launch reads it (eager calls pass live keys), so a dropped key
        frees its device memory. A capturing program holds the keys themselves
        (``retain_for_capture``): an engine's default key can be replaced
        (``generate_keys``) while a graph still reads it."""
        addrs = tuple(data_pointer(k) for k in keys)
        gs = tuple(None if g is None else int(g) % (2 * self.n) for g in galois_elements)

        def build_keys() -> Any:
            return self._upload(np.array(addrs, dtype=np.uint64))

        def build_perms() -> Any:
            ident = np.arange(self.n, dtype=np.int32)
            rows = [ident if g is None else ntt_automorphism_permutation(self.n, g) for g in gs]
            return self._upload(np.stack(rows))

        retain_for_capture(*keys)  # a captured graph reads them by address: the engine's own keys included
        return self._cached(("keyptrs", addrs), build_keys), self._cached(("perms", gs), build_perms)

    def keyswitch_from_digits_many(
        self, digits_ntt, keys, rows, galois_elements, *, c0=None, domain="coefficient", out=None
    ):
        """All rotations of one hoisted ModUp: one inner-product launch for every (key, Galois
        element), one batched ModDown (``_moddown_launch``): ``[E, 2, ..., L, N]`` in ``domain``;
        ``c0`` (in ``domain``) is added through the matching automorphism (see the contract).
        ``out`` may be a strided view (e.g. the component-major ``[2, E, ...]`` storage of a
        batched ciphertext, axes swapped) as long as each ``[..., L, N]`` block is contiguous."""
        check_domain(domain, "keyswitch_from_digits_many")
        keys, galois_elements = list(keys), list(galois_elements)
        if len(keys) != len(galois_elements) or not keys:
            raise ValueError(f"keyswitch_from_digits_many: {len(keys)} keys for {len(galois_elements)} galois elements")
        rows, t, digits, keys, key_rows = self._ks_inputs(digits_ntt, keys, rows, "keyswitch_from_digits_many")
        for g in galois_elements:
            if g is not None and int(g) % 2 == 0:
                raise ValueError(f"galois element must be odd, got {g}")
        L, n = len(rows), self.n
        E = len(keys)
        batch_shape = tuple(digits.shape[1:-2])
        batch = _prod(batch_shape)
        if c0 is not None:
            c0 = self._check(c0, rows, "keyswitch_from_digits_many")
            if tuple(c0.shape[:-2]) != batch_shape:
                raise ValueError(f"keyswitch_from_digits_many: c0 batch {c0.shape[:-2]} != digits batch {batch_shape}")
        out_strides = self._many_out(out, (E, 2) + batch_shape + (L, n))
        if 2 * E * batch > _MAX_GRID_YZ:
            return keyswitch_from_digits_many_by_loop(
                self, digits, keys, rows, galois_elements, c0=c0, domain=domain, out=out
            )
        # overlapped: the special primes' rows first; the Q rows' launch runs beside the ModDown's work on them
        acc, perms, q_rows = self._inner_product_launch(digits, keys, galois_elements, t, batch, key_rows,
                                                        split=self._overlaps_moddown(domain, 2 * E * batch, L))
        return self._moddown_many(acc, perms, t, rows, galois_elements, batch_shape, c0, domain, out, out_strides,
                                  beside=q_rows)

    def _overlaps_moddown(self, domain: str, entries: int, L: int) -> bool:
        """Whether a key switch overlaps its ModDown with its inner product (``_moddown_launch``'s
        ``beside``): NTT output, more than one special prime (one prime divides inside the NTT's
        column kernel), side streams allowed and not already inside ``run_independent``'s branches
        (those keep the GPU busy themselves), and a ModDown whose forward NTT is one launch group.

        The inner product of the K special-prime rows runs first; a side stream takes them through
        the ModDown's inverse NTT and base conversion (small or latency-bound launches: they
        overlap as far as the inner product leaves SMs free) while the caller's stream computes
        the L Q rows, in a bounded grid where there are no more digits than special primes
        (``_q_rows_kip_blocks``). Measured on the H200, graph replay, side by side
        (``bench/results/2026-11-30-s23/final_ab/``), against the two in turn: 34 Q + 6 P primes,
        dnum 4: key switch 231.9 -> 228.8 us, 7 keys 1393 -> 1373, rotation unchanged (504-507);
        35 Q + 4 P, dnum 9 (full grid): key switch 306.6 -> 304.5, 7 keys 1927 -> 1882, rotation
        832.5 -> 830.4."""
        return (self._moddown_overlap and domain == "ntt" and len(self.p_rows) > 1 and self._branch_streams > 1
                and not getattr(self._branches, "open", False) and len(self._groups(entries, L)) == 1)

    def _q_rows_kip_blocks(self, num_digits: int) -> int:
        """Blocks for the Q rows' inner product of an overlapped ModDown (0: the full grid):
        ``FHE_MODDOWN_KIP_BLOCKS`` per SM where there are no more digits than special primes
        (``keyswitch_inner_product_many_strided``), so the side stream finds SMs free. Against
        the full grid it gains at 34 Q + 6 P, dnum 4, with 7 keys (1397 -> 1373 us); at 35 Q + 4 P,
        dnum 9, it made the key switch 23 us slower, hence the rule (``2026-11-30-s23``)."""
        return self._moddown_kip_blocks * self._sm_count if num_digits <= len(self.p_rows) else 0

    def _moddown_many(self, acc: Any, perms: Any, t: dict[str, Any], rows: tuple[int, ...],
                      galois_elements: Sequence[int | None], batch_shape: tuple[int, ...], c0: Any, domain: str,
                      out: Any, out_strides: tuple[int, int] | None,
                      beside: Callable[[], None] | None = None) -> Any:
        """``keyswitch_from_digits_many`` after its inner product: the ModDown of ``acc [E, 2,
        batch, R, N]`` into ``out`` (``None``: new ``[E, 2, *batch_shape, L, N]``) in ``domain``,
        plus ``c0`` through each element's automorphism (``perms``: their NTT-domain
        permutations). ``beside``: see ``_moddown_launch``."""
        L, n, E, batch = len(rows), self.n, len(galois_elements), _prod(batch_shape)
        if out is None:
            out = self.xp.empty((E, 2) + batch_shape + (L, n), dtype=np.uint64)
        if domain == "ntt":  # the rotated c0 is added inside the combine kernel
            self._moddown_launch(acc, out, t, L, E * 2 * batch, domain, batch, c0, perms, out_strides, beside)
            return out
        self._moddown_launch(acc, out, t, L, E * 2 * batch, domain, batch, out_strides=out_strides, beside=beside)
        if c0 is not None:
            gs = tuple(1 if g is None else int(g) % (2 * n) for g in galois_elements)
            maps = self._cached(("coefmaps", gs),
                                lambda: self._upload(np.stack([coefficient_automorphism_map(n, g) for g in gs])))
            _, rowmap = self._rows(rows)
            plane = L * n
            self._launch("automorphism_coefficient_add_many", (-(-n // _BLOCK), L, E * batch), _BLOCK,
                         (c0, out, maps, rowmap, self._consts, np.int32(self.num_moduli), np.int32(n),
                          np.int32(batch), np.int64(plane),
                          np.int64(2 * batch * plane if out_strides is None else out_strides[0]), np.int64(plane)))
        return out

    def _inner_product_launch(self, digits: Any, keys: Sequence[Any], galois_elements: Sequence[int | None],
                              t: dict[str, Any], batch: int, key_rows: int,
                              add: tuple[Any, Any] | None = None,
                              split: bool = False) -> tuple[Any, Any, Callable[[], None] | None]:
        """``keyswitch_inner_product_many``: the NTT-domain inner products ``[E, 2, batch, R, N]``
        of checked digits with every (key, Galois element); returns them, the permutations and
        ``None``. ``split`` (``_overlaps_moddown``): only the K special-prime rows are launched,
        and the third value launches the L Q rows (``_q_rows_kip_blocks``'s grid), for
        ``_moddown_launch``'s ``beside``. ``add = (c, scalars)`` (one key;
        ``keyswitch_inner_product_add_scaled``): the Q rows also get ``c * w_r`` (``c`` checked
        ``[2, batch, L, N]``, ``scalars`` a ``_shoup_scalars`` table of its L rows)."""
        n, R, D, E = self.n, len(t["out_rows"]), t["num_digits"], len(keys)
        if add is not None and (E != 1 or split):
            raise ValueError(f"the scaled add of an inner product takes one key and no split, got {E} keys")
        key_table, perms = self._many_tables(keys, galois_elements)
        acc = self.xp.empty((E, 2, batch, R, n), dtype=np.uint64)
        if add is None:
            first = R - len(self.p_rows) if split else 0  # the Q rows come first in acc
            self._inner_product_rows(digits, key_table, perms, acc, t, key_rows, first, R - first)
            if not split:
                return acc, perms, None
            blocks = self._q_rows_kip_blocks(D)
            return acc, perms, lambda: self._inner_product_rows(digits, key_table, perms, acc, t, key_rows, 0, first,
                                                                blocks)
        head = (digits, key_table, acc, t["out_map"], self._consts, t["key_digits"], perms)
        sizes = (np.int32(self.num_moduli), np.int32(n), np.int32(R), np.int32(batch), np.int32(D),
                 np.int32(key_rows))
        self._launch("keyswitch_inner_product_add_scaled", (-(-n // _BLOCK), R, E * batch), _BLOCK,
                     head + add + sizes + (np.int32(add[0].shape[-2]),))
        return acc, perms, None

    def _inner_product_rows(self, digits: Any, key_table: Any, perms: Any, acc: Any, t: dict[str, Any],
                            key_rows: int, first: int, count: int, blocks: int = 0) -> None:
        """``keyswitch_inner_product_many`` into rows ``first .. first + count - 1`` of ``acc [E, 2,
        batch, R, N]`` (views from row ``first``: R stays the row stride), in about ``blocks``
        blocks (``keyswitch_inner_product_many_strided``; 0: one per 256 coefficients)."""
        n, R, D = self.n, len(t["out_rows"]), t["num_digits"]
        E, batch = acc.shape[0], acc.shape[2]
        x = full = -(-n // _BLOCK)
        if blocks > 0:
            x = max(1, min(full, -(-blocks // (count * E * batch))))
        rowmap = t["out_map"]
        if first:  # (no views for the whole inner product: eager calls pay for each)
            digits, acc, rowmap = digits[..., first:, :], acc[..., first:, :], rowmap[first:]
        self._launch("keyswitch_inner_product_many" + ("" if x == full else "_strided"), (x, count, E * batch), _BLOCK,
                     (digits, key_table, acc, rowmap, self._consts, t["key_digits"], perms, np.int32(self.num_moduli),
                      np.int32(n), np.int32(R), np.int32(batch), np.int32(D), np.int32(key_rows)))

    def keyswitch_add_rescale(self, digits_ntt, key, rows, c, *, domain="coefficient"):
        """Relinearize and rescale with one rounding (see the contract): the inner product with
        ``acc_Q += P c`` in its epilogue (``keyswitch_inner_product_add_scaled``) and one division by
        ``P q_0`` (``_moddown_rescale_launch``). NTT output costs the inverse NTT of ``q_0`` and
        the P rows and the forward NTT of the L - 1 kept ones, where a key switch, an addition
        and an NTT-domain rescale transform ``L`` rows more."""
        op = "keyswitch_add_rescale"
        rows, t, digits, keys, key_rows = self._ks_inputs(digits_ntt, [key], rows, op)
        check_keyswitch_add_rescale(self, digits, rows, c, domain)
        c = self._check(c, rows, op)
        L, n = len(rows), self.n
        batch_shape = tuple(digits.shape[1:-2])
        batch = _prod(batch_shape)
        if 2 * batch > _MAX_GRID_YZ:
            raise ValueError(f"{op}: {batch} batch entries exceed the ModDown grid's limit of {_MAX_GRID_YZ // 2}")
        p_table = self._cached(("p_multiple", rows), lambda: self._upload(self._shoup_scalars(rows, [self._big_p] * L)))
        acc, _, _ = self._inner_product_launch(digits, keys, [None], t, batch, key_rows, add=(c, p_table))
        out = self.xp.empty((2,) + batch_shape + (L - 1, n), dtype=np.uint64)
        self._moddown_rescale_launch(acc, out, rows, t, domain=domain, batch=batch)
        return out

    def keyswitch_linear_transform(self, digits_ntt, keys, rows, galois_elements, weights, c, *, rescale=False,
                                   domain=None):
        """Double-hoisted ``sum_i weights[i] * rot_i(c)`` (see the contract): one
        ``keyswitch_linear_transform_accumulate`` launch (inner products, plaintext weights and
        the ``P``-scaled ``c`` terms, never materializing the E inner products), then one
        ModDown of the 2-component accumulator (``_moddown_launch``); with ``rescale`` one
        division by ``P q_0`` instead (``_moddown_rescale_launch``), into ``domain``."""
        keys, gs, domain = check_linear_transform(self, digits_ntt, keys, tuple(int(r) for r in rows),
                                                  galois_elements, weights, c, rescale=rescale, domain=domain)
        rows, t, digits, keys, key_rows = self._ks_inputs(digits_ntt, keys, rows, "keyswitch_linear_transform")
        L, n = len(rows), self.n
        R, D, E = len(t["out_rows"]), t["num_digits"], len(keys)
        weights = self._check(weights, t["out_rows"], "keyswitch_linear_transform")
        c, c_cs = self._check_entries(c, rows, "keyswitch_linear_transform")
        key_table, perms = self._many_tables(keys, gs)
        parts = self.linear_transform_parts or self._linear_transform_parts(R)
        acc = self.xp.empty((parts, 2, R, n), dtype=np.uint64)
        self._launch("keyswitch_linear_transform_accumulate", (-(-n // self._lt_block), R, parts), self._lt_block,
                     (digits, key_table, weights, c, acc, t["out_map"], self._consts, t["key_digits"], perms,
                      t["pinv"], np.int32(self.num_moduli), np.int32(n), np.int32(R), np.int32(L), np.int32(E),
                      np.int32(D), np.int32(key_rows), np.int64(c_cs)))
        acc = acc[0] if parts == 1 else self.sum_batch(acc, 0, t["out_rows"])
        if rescale:
            out = self.xp.empty((2, L - 1, n), dtype=np.uint64)
            self._moddown_rescale_launch(acc, out, rows, t, domain=domain)
            return out
        out = self.xp.empty((2, L, n), dtype=np.uint64)
        self._moddown_launch(acc, out, t, L, 2, domain)
        return out

    def _moddown_rescale_launch(self, acc: Any, out: Any, rows: tuple[int, ...], t: dict[str, Any], *,
                                domain: str = "coefficient", batch: int = 1) -> None:
        """ModDown and rescale as one rounding division by ``P q_0`` (``q_0 = rows[0]``): the
        NTT-domain ``acc [2, batch, L + K, N]`` over ``rows + p_rows`` into ``out [2, batch, L -
        1, N]`` over ``rows[1:]`` in ``domain``; ``acc`` is overwritten (inverse NTT in place).

        Coefficient output: inverse NTT of all rows, then the base conversion of ``q_0`` and the
        P rows into ``rows[1:]`` and the combine with the division's constants in one launch
        (``keyswitch_moddown_convert_combine_s*``): 3 launches where ModDown on NTT values, the
        inverse NTT and the rescale take 8 (each transform in one launch group; ``_ntt_launch``
        splits larger ones). NTT output:
        inverse NTT of the ``q_0`` row and of the P rows only (one transform whose row-skip
        table passes over the kept rows 1 .. L - 1), the same conversion, then ``_ntt_combine``
        (the kept rows never leave the NTT domain)."""
        R, n, K, L = len(t["out_rows"]), self.n, len(self.p_rows), len(rows)

        def build() -> dict[str, Any]:
            tables = moddown_rescale_tables(self.context, rows, pieces=self._weight_pieces)
            return {"convert": (self._upload(tables["convert"]), tables["convert_size"]),
                    "pinv": self._upload(tables["pinv"]), "kept_map": t["out_map"][1:L]}

        d = self._cached(("moddown_rescale", rows), build)
        entries = 2 * batch
        acc3 = acc.reshape(entries, R, n)
        if domain == "coefficient":
            self._ntt_launch(acc3, acc3, t["out_map"], True, R * n, R * n, entries, R)
        elif len(self._groups(entries, R)) == 1:  # the divided-out rows only: q_0 (row 0), P (rows L..)
            table = self._skip_table(((1, L - 1),), entries, R)
            self._ntt_launch(acc3, acc3, t["out_map"], True, R * n, R * n, entries, R, skip=(table, L - 1))
        else:  # too large for one launch group: the two row ranges one after the other
            self._ntt_launch(acc3[:, :1], acc3[:, :1], t["out_map"][:1], True, R * n, R * n, entries, 1)
            self._ntt_launch(acc3[:, L:], acc3[:, L:], t["out_map"][L:], True, R * n, R * n, entries, K)
        plane = batch * (L - 1) * n
        if domain == "coefficient":  # conversion and combine in one launch; x = acc from its row 1
            self._convert_combine(acc3, acc3[:, 1:], out, d["convert"], d["pinv"], L - 1, entries, batch, R * n,
                                  2 * plane, plane)
            return
        self._base_convert(acc3, out, d["convert"], L - 1, 1, entries, R * n, (L - 1) * n)  # no dropped row is a target
        # x = acc from its row 1: rows[1:], then P (q_0 and P divided out: K + 1 rows), R rows an entry
        self._ntt_combine(acc3[:, 1:], out, out, d["kept_map"], d["pinv"], L - 1, K + 1, entries, batch, 2 * plane,
                          plane)

    def _linear_transform_parts(self, rows: int) -> int:
        """Rotation parts of the accumulator grid: 2 when it would run more than one and at most
        1.5 waves (FHE_LT_MIN_BLOCKS blocks of FHE_LT_BLOCK per SM: 9 of 128), else 1. Its
        blocks all live about as long, so a nearly empty last wave costs a whole block
        lifetime; two parts halve the lifetime. Measured on the H200 with blocks of 256, 4 per
        SM (N=2^14, 8 diagonals, 576 blocks for 528 slots, 2026-11-29 s4): 7-key linear
        transform 110.9 us in one part, 106.3-106.6 in 2, 106.8-107.4 in 4 (partial sums add
        2.4 MiB per part). With the default 128 x 9 the N=2^14 grid fits one wave (1152 blocks
        for 1188 slots): one part."""
        waves = -(-self.n // self._lt_block) * rows / (max(1, self._lt_min_blocks) * self._sm_count)
        return 2 if 1 < waves <= 1.5 else 1

    def _many_out(self, out: Any, shape: tuple[int, ...]) -> tuple[int, int] | None:
        """Validate a caller's ``out`` of ``keyswitch_from_digits_many``: ``None`` for a fresh or
        C-contiguous one, else its (entry, component) element strides."""
        if out is None:
            return None
        if out.dtype != np.uint64 or tuple(out.shape) != shape:
            raise ValueError(f"keyswitch_from_digits_many: out must be uint64 {shape}, got {out.dtype} {out.shape}")
        inner = shape[2:]
        want = [8 * math.prod(inner[i + 1:]) for i in range(len(inner))]
        if list(out.strides[2:]) != want or out.strides[0] % 16 or out.strides[1] % 16 or not _aligned(out):
            raise ValueError(f"keyswitch_from_digits_many: each out[e, k] block must be C-contiguous, "
                             f"got strides {out.strides}")
        if out.flags.c_contiguous:
            return None
        return out.strides[0] // 8, out.strides[1] // 8
