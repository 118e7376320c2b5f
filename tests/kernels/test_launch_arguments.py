"""Every CupyBackend launch passes arguments that match its kernel's C signature (no GPU).

The kernel library is replaced by a checker that parses ``extern "C" __global__`` signatures
from ``kernels/*.cu`` and validates count, pointer dtypes and scalar widths of each launch;
NumPy stands in for CuPy (``tests/helpers/numpy_cupy.py``; no kernel runs, results are not
checked here: ``test_launch_emulation.py`` runs emulated kernels and checks values).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from fhelium_cupy.runtime import kernels
from tests.helpers.numpy_cupy import install_numpy_cupy
from tests.kernels import gpu_cases

_SIG = re.compile(r'extern "C" __global__ void (?:[A-Z][A-Z0-9_]*_BOUNDS )?(\w+)\((.*?)\)\s*\{', re.S)


def _signatures() -> dict[str, list[str]]:
    sigs = {}
    for source in kernels.KERNEL_SOURCES:
        for name, params in _SIG.findall((kernels.kernel_source_dir() / source).read_text()):
            sigs[name] = [p.strip() for p in params.replace("\n", " ").split(",")] if params.strip() else []
    return sigs


class _Checker:
    def __init__(self, name: str, params: list[str]) -> None:
        self.name, self.params = name, params
        self.max_dynamic_shared_size_bytes = 0  # the opt-in attribute (past 48 KiB)

    def __call__(self, grid, block, args, shared_mem=0):
        assert len(args) == len(self.params), f"{self.name}: {len(args)} args for {len(self.params)} params"
        for arg, param in zip(args, self.params):
            if "*" in param:
                if isinstance(arg, np.ndarray):
                    want = (np.uint64 if "u64" in param else np.float64 if "double" in param
                            else np.int32 if "int" in param else np.uint32)
                    assert arg.dtype == want, f"{self.name}: {param} got {arg.dtype}"
                else:
                    assert isinstance(arg, np.uint64) and arg == 0, f"{self.name}: {param} got {type(arg)}"
            elif param.startswith("int "):
                assert isinstance(arg, np.int32), f"{self.name}: {param} got {type(arg)}"
            elif param.startswith("i64 "):
                assert isinstance(arg, np.int64), f"{self.name}: {param} got {type(arg)}"
            else:
                raise AssertionError(f"{self.name}: unexpected parameter {param}")
        assert all(g >= 1 for g in grid) and grid[1] <= 65535 and grid[2] <= 65535, grid
        assert 1 <= block[0] <= 1024 and shared_mem <= max(48 * 1024, self.max_dynamic_shared_size_bytes)


@pytest.fixture
def fake_backend_factory(monkeypatch):
    sigs = _signatures()

    def kernels_for(options):
        checkers: dict[str, _Checker] = {}  # one per kernel, as a library's: attributes stay set
        return lambda name: checkers.setdefault(name, _Checker(name, sigs[name]))

    return install_numpy_cupy(monkeypatch, kernels_for)


@pytest.mark.parametrize("ctx_name", ["n4096", "n16384", "n4096w"])
def test_every_primitive_launches_with_arguments_matching_the_kernel_signature(fake_backend_factory, ctx_name):
    ctx = gpu_cases.context(ctx_name)
    backend = fake_backend_factory(ctx)
    ref = gpu_cases.reference(ctx)
    for case in gpu_cases.CASES:
        gpu_cases.run_case(case, backend, ref, ctx_name)
    assert backend.launch_count > 0


def test_l2_groups_cover_every_polynomial_once(fake_backend_factory):
    backend = fake_backend_factory(gpu_cases.context("n16384"), l2_group_bytes=1 << 20)
    for batch, limbs in [(2, 9), (1, 9), (7, 3), (40, 9)]:
        cover = np.zeros((batch, limbs), dtype=int)
        for b0, b1, l0, l1 in backend._groups(batch, limbs):
            cover[b0:b1, l0:l1] += 1
        assert (cover == 1).all(), (batch, limbs)


def test_base_conversion_too_large_for_shared_memory_is_a_clear_error(fake_backend_factory):
    """One 80-prime digit into 83 rows needs > 48 KiB of tables: refused before any launch."""
    from tests.helpers import ring_oracle as ro

    n = 64
    ctx = ro.make_context(n, ro.ntt_primes(40, 80, n), ro.ntt_primes(60, 3, n), dnum=1)
    backend = fake_backend_factory(ctx)
    rows = tuple(range(80))
    c = np.zeros((80, n), dtype=np.uint64)
    before = backend.launch_count
    with pytest.raises(ValueError, match="shared memory"):
        backend.modup(c, rows)
    assert backend.launch_count == before
    backend.modup(c[:40], rows[:40])  # 40 primes: fits
    assert backend.launch_count > before


def _one_key_switch(fake_backend_factory, seed: int):
    """(backend, switch, key) on the fake n4096 backend: ``switch(key)`` runs one NTT-domain
    batched key switch of fixed digits with that key (Galois element 5)."""
    ctx = gpu_cases.context("n4096")
    backend = fake_backend_factory(ctx)
    rows = tuple(range(ctx.q_count - 1))
    rng = np.random.default_rng(seed)
    digits = backend.modup(gpu_cases.rand(ctx, rows, (), rng), rows)

    def switch(key):
        return backend.keyswitch_from_digits_many(digits, [key], rows, [5], domain="ntt")

    return backend, switch, gpu_cases.random_key(ctx, rng)


def test_batched_key_switch_does_not_keep_dropped_keys_alive(fake_backend_factory):
    """The key-address table is cached by address; the backend holds no reference to the keys,
    so a key dropped by its owner is freed (device memory of rotation keys is large)."""
    import gc
    import weakref

    backend, switch, key = _one_key_switch(fake_backend_factory, seed=5)
    switch(key)
    before = backend.launch_count
    switch(key)  # cached tables reused
    assert backend.launch_count > before
    watch = weakref.ref(key)
    del key
    gc.collect()
    assert watch() is None


def test_chunk_launch_geometry_follows_the_kernel_build_defines(fake_backend_factory):
    """FHE_LV and FHE_NTT_BATCH_FAST_LOG_N change the chunk kernels' block and grid: the backend
    reads them from its library's options (one source of truth), and still launches every
    primitive with matching arguments. The grid takes batch entries first from N=2^16 on by
    default (ntt.cu chunk_coords)."""
    ctx = gpu_cases.context("n16384")
    default = fake_backend_factory(ctx)
    assert (default._ntt_values_log, default._ntt_batch_fast) == (3, False)
    variant = fake_backend_factory(
        ctx, kernel_options=kernels.KernelOptions(extra=("-DFHE_LV=4", "-DFHE_NTT_BATCH_FAST_LOG_N=14"))
    )
    assert (variant._ntt_values_log, variant._ntt_batch_fast) == (4, True)
    assert fake_backend_factory(gpu_cases.context("n65536"))._ntt_batch_fast is True
    never = kernels.KernelOptions(extra=("-DFHE_NTT_BATCH_FAST_LOG_N=99",))
    assert fake_backend_factory(gpu_cases.context("n65536"), kernel_options=never)._ntt_batch_fast is False
    assert kernels.KernelOptions(extra=("-DFHE_LV=2", "-DFHE_LV=5")).define("FHE_LV", "3") == "5"
    assert kernels.KernelOptions().define("FHE_LV", "3") == "3"
    # every form NVRTC takes: a macro without a value is 1, -U restores the source's default
    flag = kernels.KernelOptions(extra=("-DFHE_NTT_BATCH_FAST_LOG_N",))
    assert flag.define("FHE_NTT_BATCH_FAST_LOG_N", "16") == "1"
    assert fake_backend_factory(ctx, kernel_options=flag)._ntt_batch_fast is True
    long_form = kernels.KernelOptions(extra=("--define-macro=FHE_LV=4", "-lineinfo", "-DFHE_LVX=9"))
    assert long_form.define("FHE_LV", "3") == "4"
    assert fake_backend_factory(ctx, kernel_options=long_form)._ntt_values_log == 4
    assert kernels.KernelOptions(extra=("-DFHE_LV=4", "-UFHE_LV")).define("FHE_LV", "3") == "3"
    assert kernels.KernelOptions(extra=("-DFHE_LV=4", "--undefine-macro=FHE_LV")).define("FHE_LV", "3") == "3"
    # forms define() cannot read are refused: NVRTC would compile a value the host never sees
    for split in (("-D", "FHE_LV=4"), ("--define-macro", "FHE_LV=4"), ("-D FHE_LV=4",), ("-DFHE_LV=4", "-U", "FHE_LV")):
        with pytest.raises(ValueError, match="one option"):
            kernels.KernelOptions(extra=split)
    with pytest.raises(ValueError, match="names no macro"):
        kernels.KernelOptions(extra=("-D=4",))
    with pytest.raises(TypeError, match="tuple of option strings"):
        kernels.KernelOptions(extra="-DFHE_LV=4")  # type: ignore[arg-type]  (was spread into characters)
    with pytest.raises(TypeError, match="options are strings"):
        kernels.KernelOptions(extra=(4,))  # type: ignore[arg-type]
    listed = kernels.KernelOptions(extra=["-DFHE_LV=4"])  # type: ignore[arg-type]
    assert listed.extra == ("-DFHE_LV=4",) and hash(listed) == hash(kernels.KernelOptions(extra=("-DFHE_LV=4",)))
    with pytest.raises(ValueError, match="-DFHE_LV=abc must be an integer"):
        fake_backend_factory(ctx, kernel_options=kernels.KernelOptions(extra=("-DFHE_LV=abc",)))
    ref = gpu_cases.reference(ctx)
    gpu_cases.run_case("ntt_forward", variant, ref, "n16384")
    assert variant.launch_count > 0


@pytest.mark.parametrize("bad", [3, -1, 8])
def test_linear_transform_parts_must_be_0_1_2_or_4(fake_backend_factory, bad):
    with pytest.raises(ValueError, match="linear_transform_parts"):
        fake_backend_factory(gpu_cases.context("n4096"), linear_transform_parts=bad)


def test_linear_transform_parts_split_only_a_grid_with_a_nearly_empty_last_wave(fake_backend_factory):
    """132 SMs x 9 blocks of 128 (the default build): N=2^14 with 9 rows is 1152 blocks (0.97
    waves) and 5 rows fit one wave -> 1 part; 10 rows are 1280 blocks (1.08 waves) -> 2; 16 rows
    fill 1.72 waves and 40 rows at N=2^16 are 20 waves -> 1. The s4 build (blocks of 256, 4 per
    SM) split the 9-row grid (576 blocks for 528 slots)."""
    backend = fake_backend_factory(gpu_cases.context("n16384"))
    assert backend._sm_count == 132
    assert (backend._lt_block, backend._lt_min_blocks) == (128, 9)
    assert backend._linear_transform_parts(9) == 1
    assert backend._linear_transform_parts(5) == 1
    assert backend._linear_transform_parts(10) == 2
    assert backend._linear_transform_parts(16) == 1
    s4 = fake_backend_factory(gpu_cases.context("n16384"),
                              kernel_options=kernels.KernelOptions(extra=("-DFHE_LT_BLOCK=256", "-DFHE_LT_MIN_BLOCKS=4")))
    assert s4._linear_transform_parts(9) == 2
    big = fake_backend_factory(gpu_cases.context("n65536"))
    assert big._linear_transform_parts(40) == 1


def _ntt_launches(backend, batch: int, limbs: int) -> list[tuple[str, tuple, int]]:
    """(kernel, grid, block) of every launch of a forward then an inverse NTT of
    [batch, limbs, N] zeros (recorded around the backend's checked fake launches)."""
    got: list = []
    real = backend._launch

    def record(name, grid, block, args, shared_mem=0):
        got.append((name, grid, block))
        real(name, grid, block, args, shared_mem=shared_mem)

    backend._launch = record
    try:
        a = np.zeros((batch, limbs, backend.n), dtype=np.uint64)
        backend.ntt_forward(a, tuple(range(limbs)))
        backend.ntt_inverse(a, tuple(range(limbs)))
    finally:
        del backend._launch
    return got


def test_small_chunks_take_the_v4_chunk_kernels_with_twice_the_threads(fake_backend_factory):
    """A launch whose main chunk kernel would hold fewer threads than the GPU (132 SMs x 2048)
    takes the _v4 chunk kernels, 4 coefficients per thread, for any chunk up to 2^12 (the
    default FHE_NTT_V4_MAX_LOG_CHUNK=12); GPU-filling grids keep the main kernels (2^FHE_LV
    per thread); FHE_NTT_V4_MAX_LOG_CHUNK=11 keeps them for 4096-word chunks, and 0 turns the
    _v4 kernels off."""
    from fhelium_cupy.ckks.backends import cupy_backend as cb

    def launches(backend, batch, limbs):
        return [(name, block) for name, _, block in _ntt_launches(backend, batch, limbs) if "chunk" in name]

    ctx = gpu_cases.context("n16384")
    small = fake_backend_factory(ctx)
    assert small._ntt_v4_max_log_chunk == 12
    lc = small._chunk_log(2 * 3)
    assert lc <= 11
    assert launches(small, 2, 3) == [("ntt_forward_chunk_stages_v4", (1 << lc) >> 2),
                                     ("ntt_inverse_chunk_stages_v4", (1 << lc) >> 2)]
    off = fake_backend_factory(ctx, kernel_options=kernels.KernelOptions(extra=("-DFHE_NTT_V4_MAX_LOG_CHUNK=0",)))
    assert launches(off, 2, 3) == [("ntt_forward_chunk_stages", (1 << lc) >> 3),
                                   ("ntt_inverse_chunk_stages", (1 << lc) >> 3)]
    many = small._chunk_log(132)  # 132 x 2^14 coefficients: 132 x 2048 threads of 8, a full GPU
    assert many == 11 and not small._use_v4(many, 132) and small._use_v4(many, 131)
    # (40-bit rows in 2^11-word chunks: the _f64 forms of the main kernels)
    assert launches(small, 132, 1) == [("ntt_forward_chunk_stages_f64", 256), ("ntt_inverse_chunk_stages_f64", 256)]
    big = fake_backend_factory(ctx, ntt_fill_blocks=1)  # the largest chunk (2^12) for any batch
    assert big._chunk_log(6) == cb._CHUNK_LOG
    assert launches(big, 2, 3) == [("ntt_forward_chunk_stages_v4", 1024), ("ntt_inverse_chunk_stages_v4", 1024)]
    big11 = fake_backend_factory(ctx, ntt_fill_blocks=1,
                                 kernel_options=kernels.KernelOptions(extra=("-DFHE_NTT_V4_MAX_LOG_CHUNK=11",)))
    assert launches(big11, 2, 3) == [("ntt_forward_chunk_stages_f64", 512), ("ntt_inverse_chunk_stages_f64", 512)]


def test_rows_below_2_to_45_in_large_chunks_take_the_f64_chunk_kernels(fake_backend_factory):
    """The _f64 chunk kernels (float64 butterflies only: 32 registers, a full SM) run a plain
    transform whose every prime is below 2^45, in chunks of 2^11 or 2^12 words with column
    stages; a wider prime in the launch, a 2^10-word chunk, a whole transform in one chunk,
    the _v4 forms, FHE_NTT_F64_CHUNK=0 and FHE_NTT_F64=0 keep the main kernels (the emulated
    _f64 kernels assert their contract: chunk and primes)."""
    ctx = gpu_cases.context("n16384")  # 8 primes of 40 bits (Q) and one of 60 (P)
    backend = fake_backend_factory(ctx, ntt_fill_blocks=1)  # 2^12-word chunks for any batch

    def chunk_kernels(b, batch, rows):
        got: list = []
        real = b._launch

        def record(name, grid, block, args, shared_mem=0):
            got.append(name)
            real(name, grid, block, args, shared_mem=shared_mem)

        b._launch = record
        try:
            a = np.zeros((batch, len(rows), b.n), dtype=np.uint64)
            b.ntt_forward(a, rows)
            b.ntt_inverse(a, rows)
        finally:
            del b._launch
        return [name for name in got if "chunk" in name]

    narrow, wide = (3, 4), (3, 4, 8)  # 40-bit rows; the 60-bit P row among them
    assert backend._f64_rows(narrow) and not backend._f64_rows(wide) and not backend._f64_rows((8,))
    many = 2 * backend._gpu_threads // backend.n * 8  # threads enough for the main kernels (no _v4)
    assert chunk_kernels(backend, many, narrow) == ["ntt_forward_chunk_stages_f64", "ntt_inverse_chunk_stages_f64"]
    assert chunk_kernels(backend, many, wide) == ["ntt_forward_chunk_stages", "ntt_inverse_chunk_stages"]
    assert chunk_kernels(backend, 1, narrow) == ["ntt_forward_chunk_stages_v4", "ntt_inverse_chunk_stages_v4"]
    for flag in ("-DFHE_NTT_F64_CHUNK=0", "-DFHE_NTT_F64=0"):
        off = fake_backend_factory(ctx, ntt_fill_blocks=1, kernel_options=kernels.KernelOptions(extra=(flag,)))
        assert chunk_kernels(off, many, narrow) == ["ntt_forward_chunk_stages", "ntt_inverse_chunk_stages"], flag
    n14 = fake_backend_factory(ctx)
    q_rows = tuple(range(8))
    assert n14._chunk_log(8 * 4) == 10  # a 2^10-word chunk: the main kernels
    assert not any(name.endswith("_f64") for name in chunk_kernels(n14, 4, q_rows))
    n4096 = fake_backend_factory(gpu_cases.context("n4096"), ntt_fill_blocks=1)  # one 2^12-word chunk: whole
    assert n4096._f64_rows((3, 4))  # its two 40-bit primes
    single = 2 * n4096._gpu_threads // n4096.n * 8
    assert chunk_kernels(n4096, single, (3, 4)) == ["ntt_forward_chunk_stages", "ntt_inverse_chunk_stages"]


def test_column_kernels_take_two_threads_per_column_when_the_gpu_is_underfilled(fake_backend_factory):
    """FHE_NTT_COLUMN_X2=2 (default): the _x2 column kernels (lanes 2j, 2j + 1 share column j)
    when one thread per column would hold fewer threads than the GPU; their grid covers 2C
    threads with a block that divides it (every lane of a warp live for the shuffles)."""
    ctx = gpu_cases.context("n16384")

    def columns(backend, batch, limbs):
        return [g for g in _ntt_launches(backend, batch, limbs) if "column" in g[0]]

    backend = fake_backend_factory(ctx)
    assert backend._ntt_column_x2 == 2
    log_chunk = backend._chunk_log(2 * 9)
    chunk = 1 << log_chunk
    launched = columns(backend, 2, 9)
    assert [name for name, _, _ in launched] == ["ntt_forward_column_stages_x2", "ntt_inverse_column_stages_x2"]
    for _, grid, block in launched:
        assert grid[0] * block == 2 * chunk and (2 * chunk) % block == 0 and block % 32 == 0
    assert backend.log_n - log_chunk == 4
    assert backend._use_column_x2(log_chunk, 2 * 9)
    assert not backend._use_column_x2(log_chunk, 1 << 12)  # a GPU-filling batch keeps one thread a column
    assert not backend._use_column_x2(backend.log_n - 1, 2)  # one column stage: nothing to split
    never = fake_backend_factory(ctx, kernel_options=kernels.KernelOptions(extra=("-DFHE_NTT_COLUMN_X2=0",)))
    assert [name for name, _, _ in columns(never, 2, 9)] == ["ntt_forward_column_stages", "ntt_inverse_column_stages"]


def test_tables_a_capture_looks_up_are_kept_by_the_capturing_program(fake_backend_factory):
    """Kernels read cached tables by address: every lookup inside a capture is handed to the
    runtime's retention list, so evicting the cache entry cannot free what a graph reads."""
    from fhelium_cupy.runtime import retention

    backend = fake_backend_factory(gpu_cases.context("n4096"))
    eager = backend._cached(("probe", 1), lambda: np.arange(3))  # outside a capture: nothing kept
    with retention.collecting() as kept:
        table = backend._cached(("probe", 1), lambda: np.arange(5))  # cached already: same object
        backend._cached(("probe", 1), lambda: np.arange(5))  # looked up again: kept once
        rows = tuple(range(gpu_cases.context("n4096").q_count))
        backend.mul_scalar(np.zeros((len(rows), backend.n), np.uint64), [3] * len(rows), rows)
    assert table is eager and any(item is eager for item in kept)
    assert sum(item is eager for item in kept) == 1  # two lookups, one reference
    assert len(kept) >= 2  # the scalar table of mul_scalar too
    backend._cache.clear()  # an eviction: the program's list still holds the tables
    assert any(item is eager for item in kept)
    with retention.collecting() as outer:
        with retention.collecting() as inner:
            retention.retain_for_capture("x")
        retention.retain_for_capture("y")
    assert inner == ["x"] and outer == ["y"]
    with retention.collecting() as several:
        retention.retain_for_capture("y", "w", "y")
    assert several == ["y", "w"]
    retention.retain_for_capture("z")  # no capture: a no-op


def test_a_table_first_built_inside_a_capture_stays_private_to_that_graph(fake_backend_factory):
    """Built while capturing, a table's memory and upload belong to the graph (arena memory, a
    captured copy): the shared cache must not hand it to eager code or other captures."""
    from fhelium_cupy.runtime import retention

    backend = fake_backend_factory(gpu_cases.context("n4096"))
    with retention.collecting() as kept:
        private = backend._cached(("probe", 2), lambda: np.arange(4))
    assert ("probe", 2) not in backend._cache and any(item is private for item in kept)
    eager = backend._cached(("probe", 2), lambda: np.arange(4))
    assert eager is not private and backend._cache[("probe", 2)] is eager

    def refused_upload():
        raise RuntimeError("operation not permitted when stream is capturing")

    with retention.collecting(), pytest.raises(RuntimeError, match=r"'probe'.*warmup >= 1"):
        backend._cached(("probe", 3), refused_upload)
    assert ("probe", 3) not in backend._cache


def test_the_table_cache_survives_threads_inserting_while_one_evicts(fake_backend_factory):
    """Past the limit a miss of an open-ended kind (scalar, key-address tables) rebuilds the
    dict; other threads' misses insert at the same time. Under the lock: no 'dictionary
    changed size during iteration', no lost table, and one build per key."""
    from fhelium_cupy.ckks.backends import cupy_backend
    from tests.helpers.threads import run_together

    ctx = gpu_cases.context("n4096")
    backend = fake_backend_factory(ctx)
    rows = (0,)
    for i in range(cupy_backend._CACHE_LIMIT - 50):
        backend._cache[("scalar", rows, (i,))] = i
    builds: list[tuple] = []

    def worker(t: int) -> None:
        for i in range(200):
            if i % 2:
                key = ("probe", t, i)
                backend._cached(key, lambda key=key: builds.append(key) or np.array([len(builds)]))
            else:  # a new scalar table: a miss of an evictable kind
                backend._scalar_table(rows, [10**6 + 1000 * t + i])

    run_together(worker, 4)  # asserts that no worker raised; threads switch inside the eviction's dict walk
    assert len(builds) == len(set(builds)) == 4 * 100  # each probe built once
    assert all(("probe", t, i) in backend._cache for t in range(4) for i in range(1, 200, 2))  # none lost
    assert len(backend._cache) <= cupy_backend._CACHE_LIMIT + 1


def test_racing_first_ntts_build_the_twiddles_once(fake_backend_factory):
    from tests.helpers.threads import run_together

    backend = fake_backend_factory(gpu_cases.context("n4096"))
    got = run_together(lambda _: backend._tw(), 4)
    assert len(got) == 4 and all(tables is got[0] for tables in got)


def test_twiddle_tables_carry_their_float64_copies_after_the_pairs(fake_backend_factory):
    """ntt_stages.cuh twiddle_row reads past a table's [M, N, 2] (w, Shoup) pairs: the same
    allocation then holds [M, N] float64 copies of w, which the float64 arithmetic multiplies by
    (primes below 2^45: exact)."""
    from fhelium_cupy.ckks.backends._cupy_tables import twiddle_tables

    ctx = gpu_cases.context("n4096")
    backend = fake_backend_factory(ctx)
    m, n = len(ctx.moduli), ctx.ring_degree
    for table, (first, second) in zip(backend._tw(), ((0, 1), (2, 3))):
        assert table.shape == (m, n, 2) and table.base is not None and table.base.size == 3 * m * n
        words = table.base
        assert np.shares_memory(words, table) and np.array_equal(words[: 2 * m * n], table.ravel())
        floats = words[2 * m * n:].view(np.float64).reshape(m, n)
        for r, (q, psi) in enumerate(zip(ctx.moduli, ctx.psi)):
            t = twiddle_tables(q, psi, n)
            assert np.array_equal(table[r, :, 0], t[first]) and np.array_equal(table[r, :, 1], t[second])
            if q < 1 << 45:
                assert np.array_equal(floats[r].astype(np.uint64), t[first])


def test_a_capture_holds_the_keys_its_key_switches_read(fake_backend_factory):
    """The graph reads keys by address: an engine's default key replaced after the capture
    (``generate_keys``) must stay allocated while the program lives."""
    import gc
    import weakref

    from fhelium_cupy.runtime import retention

    _, switch, key = _one_key_switch(fake_backend_factory, seed=6)
    switch(key)  # warmup: tables cached
    with retention.collecting() as kept:
        switch(key)
    watch = weakref.ref(key)
    del key
    gc.collect()
    assert watch() is not None  # the capture's list holds it
    kept.clear()
    gc.collect()
    assert watch() is None


def test_launches_per_operation_are_the_documented_counts(fake_backend_factory):
    """N=2^14 (every transform one launch group of two kernels, the build defaults; digits of
    one prime and one special prime, so ModUp's and the NTT-output ModDown's conversions run in
    the NTT's column kernel, which for the small one-prime divisions also finishes the
    divided-out row's inverse NTT): the launch counts of README.md's operation table and
    ``bench/kernels_gpu.py``; one launch more or fewer anywhere is a change to measure and
    document."""
    ctx = gpu_cases.context("n16384")
    backend = fake_backend_factory(ctx)
    rng = np.random.default_rng(3)
    rows = tuple(range(ctx.q_count))
    targets = rows + tuple(range(ctx.q_count, ctx.q_count + ctx.p_count))
    ct = gpu_cases.rand(ctx, rows, (2,), rng)
    digits = backend.modup(ct[1], rows)
    key = gpu_cases.random_key(ctx, rng)
    keys = [gpu_cases.random_key(ctx, rng) for _ in range(3)]
    gs = [5, None, 25]
    weights = gpu_cases.rand(ctx, targets, (4,), rng)
    lt_keys, lt_gs = keys, [5, 25, 2 * ctx.ring_degree - 1]
    ops = {
        "forward NTT of a ciphertext": (lambda: backend.ntt_forward(ct, rows), 2),
        "rescale, coefficients": (lambda: backend.rescale(ct, rows, domain="coefficient"), 1),
        "rescale, NTT values": (lambda: backend.rescale(ct, rows, domain="ntt"), 3),
        "ModUp": (lambda: backend.modup(ct[1], rows), 2),
        "ModUp given the input's NTT": (lambda: backend.modup(ct[1], rows, c_ntt=ct[0]), 2),
        "NTT of a ciphertext and ModUp of its c1": (lambda: backend.ntt_forward_and_modup(ct, rows), 2),
        "key switch, coefficient output": (lambda: backend.keyswitch_from_digits(digits, key, rows), 4),
        "key switch, NTT output": (lambda: backend.keyswitch_from_digits(digits, key, rows, domain="ntt"), 4),
        "3 key switches, coefficient output": (lambda: backend.keyswitch_from_digits_many(digits, keys, rows, gs), 4),
        "3 key switches, NTT output, rotated c0": (
            lambda: backend.keyswitch_from_digits_many(digits, keys, rows, gs, c0=ct[0], domain="ntt"), 5),
        "relinearize and rescale, coefficient output": (
            lambda: backend.keyswitch_add_rescale(digits, key, rows, ct), 4),
        "relinearize and rescale, NTT output": (
            lambda: backend.keyswitch_add_rescale(digits, key, rows, ct, domain="ntt"), 6),
        "linear transform with rescale, coefficient output": (
            lambda: backend.keyswitch_linear_transform(digits, lt_keys, rows, lt_gs, weights, ct, rescale=True), 4),
        "linear transform with rescale, NTT output": (
            lambda: backend.keyswitch_linear_transform(digits, lt_keys, rows, lt_gs, weights, ct, rescale=True,
                                                       domain="ntt"), 6),
    }
    got = {}
    for name, (op, _) in ops.items():
        before = backend.launch_count
        op()
        got[name] = backend.launch_count - before
    assert got == {name: want for name, (_, want) in ops.items()}


def test_fused_inputs_and_outputs_refuse_launch_shapes_they_cannot_serve(fake_backend_factory):
    """The NTT's column input (the rescale's correction) and the inner product's scaled add
    are refused, before any launch, where their kernels do not apply."""
    ctx = gpu_cases.context("n16384")
    backend = fake_backend_factory(ctx)
    n, rows = ctx.ring_degree, tuple(range(ctx.q_count))
    _, rowmap = backend._rows(rows)
    data = np.zeros((2, len(rows), n), dtype=np.uint64)

    def never(*args):
        pytest.fail("column input launched")

    plane = len(rows) * n
    assert backend._column_input_fits(2, len(rows))
    calls = [dict(inverse=True)]  # a forward transform only (a row-skip table is the input's business)
    for call in calls:
        before = backend.launch_count
        with pytest.raises(ValueError, match="column input"):
            backend._ntt_launch(data, data, rowmap, call["inverse"], plane, plane, 2, len(rows),
                                skip=call.get("skip"), column_input=never)
        assert backend.launch_count == before
    split = fake_backend_factory(ctx, l2_group_bytes=1 << 17)
    assert not split._column_input_fits(2, len(rows))  # several launch groups
    with pytest.raises(ValueError, match="one launch group"):
        split._ntt_launch(data, data, rowmap, False, plane, plane, 2, len(rows), column_input=never)
    assert split.launch_count == 0
    small_ctx = gpu_cases.context("n4096")  # N = 4096: one chunk kernel does every stage
    small = fake_backend_factory(small_ctx, ntt_fill_blocks=1)
    small_rows = tuple(range(small_ctx.q_count))
    small_data = np.zeros((2, len(small_rows), small_ctx.ring_degree), dtype=np.uint64)
    small_plane = len(small_rows) * small_ctx.ring_degree
    assert not small._column_input_fits(2, len(small_rows))
    with pytest.raises(ValueError, match="column stages"):
        small._ntt_launch(small_data, small_data, small._rows(small_rows)[1], False, small_plane, small_plane, 2,
                          len(small_rows), column_input=never)
    assert small.launch_count == 0
    rng = np.random.default_rng(4)
    digits = backend.modup(gpu_cases.rand(ctx, rows, (), rng), rows)
    t = backend._keyswitch_device(rows)
    keys = [gpu_cases.random_key(ctx, rng) for _ in range(2)]
    before = backend.launch_count
    with pytest.raises(ValueError, match="one key"):
        backend._inner_product_launch(digits, keys, [None, None], t, 1, len(ctx.moduli), add=(data, data))
    assert backend.launch_count == before


def test_index_maps_and_row_skip_tables_do_not_grow_without_bound(fake_backend_factory):
    """Galois index maps (E x N int32, one per element tuple: 512 KiB for two at N=2^16) and
    row-skip tables (one per batch size) were never evicted (audit, session 32): past 64 index
    maps a miss of one drops them all; row-skip tables go with the other small open-ended kinds."""
    from fhelium_cupy.ckks.backends import cupy_backend
    from tests.helpers.numpy_cupy import _Device

    backend = fake_backend_factory(gpu_cases.context("n4096"))
    synchronized = _Device.synchronized
    for i in range(3 * cupy_backend._LARGE_LIMIT):
        kind = ("perms", "coefmaps")[i % 2]
        backend._cached((kind, (i,)), lambda i=i: np.array([i]))
        large = [k for k in backend._cache if k[0] in cupy_backend._LARGE_EVICTABLE]
        assert 1 <= len(large) <= cupy_backend._LARGE_LIMIT
    assert _Device.synchronized - synchronized == 2  # each eviction waits for the device first
    assert "row_skip" in cupy_backend._EVICTABLE
