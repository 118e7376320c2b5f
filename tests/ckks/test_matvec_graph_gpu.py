"""The FHE matvec captured as a CUDA Graph: replays with changing encrypted inputs."""

from __future__ import annotations

import ctypes
import random
from contextlib import contextmanager
from functools import partial

import numpy as np
import pytest

from fhelium_cupy.ckks import (
    CkksEngine,
    encode_bsgs_diagonals,
    encode_diagonals,
    matrix_vector,
    matrix_vector_bsgs,
    periodic_message,
    required_rotation_steps,
    required_rotation_steps_bsgs,
)
from fhelium_cupy.errors import CudaGraphInputError
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram
from fhelium_cupy.runtime.pool import CudaGraphPool

pytestmark = pytest.mark.gpu

PRESET = "slots8192-scale40-depth7"
_STATE: dict = {}


def setup(n: int):
    if "engine" not in _STATE:
        engine = CkksEngine(PRESET, device="cuda")
        engine.generate_keys()
        _STATE["engine"] = engine
    engine = _STATE["engine"]
    key = ("schedule", n)
    if key not in _STATE:
        rng = np.random.default_rng(n)
        a = rng.uniform(-1, 1, (n, n))
        keys = engine.rotation_keys(required_rotation_steps(n))
        schedule = partial(matrix_vector, engine=engine, diagonals=encode_diagonals(engine, a), rotation_keys=keys)
        _STATE[key] = (a, schedule)
    return (engine, *_STATE[key])


def _encrypt(engine, x):
    return engine.encrypt_message(periodic_message(x, engine.num_slots))


def _err(engine, ct, expected):
    return float(np.max(np.abs(engine.decrypt_message(ct, real=True) - periodic_message(expected, engine.num_slots))))


def test_captured_matvec_replays_with_changing_encrypted_inputs():
    engine, a, schedule = setup(8)
    rng = np.random.default_rng(0)
    prototype = _encrypt(engine, rng.uniform(-1, 1, 8))
    program = CudaGraphProgram.capture(schedule, example_inputs=(prototype,))
    try:
        for _ in range(4):
            x = rng.uniform(-1, 1, 8)
            source = _encrypt(engine, x)
            eager = schedule(source)
            replayed = program.replay(source)
            assert _err(engine, replayed, a @ x) < 1e-6
            np.testing.assert_array_equal(replayed.data.get(), eager.data.get())  # graph == eager, bit for bit
        # a host (NumPy-backed) ciphertext fits the same buffer: signatures are device-independent
        x = rng.uniform(-1, 1, 8)
        host_source = _encrypt(engine, x).to("cpu")
        assert _err(engine, program.replay(host_source), a @ x) < 1e-6
    finally:
        program.close()


def test_borrowed_output_is_overwritten_and_owned_output_is_not():
    engine, a, schedule = setup(8)
    rng = np.random.default_rng(1)
    x1, x2 = rng.uniform(-1, 1, 8), rng.uniform(-1, 1, 8)
    with CudaGraphProgram.capture(schedule, example_inputs=(_encrypt(engine, x1),)) as program:
        owned = program.replay(_encrypt(engine, x1), copy_output=True)
        borrowed = program.replay(_encrypt(engine, x1))
        first = borrowed.data.get()
        program.replay(_encrypt(engine, x2), synchronize=True)
        assert not np.array_equal(borrowed.data.get(), first)  # same storage, new contents
        assert _err(engine, borrowed, a @ x2) < 1e-6
        assert _err(engine, owned, a @ x1) < 1e-6
        assert owned.data.data.ptr != borrowed.data.data.ptr


def test_replay_rejects_a_ciphertext_at_another_level_or_key():
    engine, a, schedule = setup(8)
    rng = np.random.default_rng(2)
    with CudaGraphProgram.capture(schedule, example_inputs=(_encrypt(engine, rng.uniform(-1, 1, 8)),)) as program:
        deeper = engine.rescale_to_next_level(_encrypt(engine, rng.uniform(-1, 1, 8)))
        with pytest.raises(CudaGraphInputError, match="level|shape|value signature"):
            program.replay(deeper)
        other = CkksEngine(PRESET, device="cuda")
        other.generate_keys()
        foreign = _encrypt(other, rng.uniform(-1, 1, 8))
        with pytest.raises(CudaGraphInputError, match="key_id"):
            program.replay(foreign)


def test_pool_of_matvec_programs_replayed_in_shuffled_order():
    rng = np.random.default_rng(3)
    with CudaGraphPool(device="cuda") as pool:
        programs = []
        for n in (4, 8, 16):
            engine, a, schedule = setup(n)
            proto = _encrypt(engine, rng.uniform(-1, 1, n))
            programs.append((n, a, CudaGraphProgram.capture(schedule, example_inputs=(proto,), pool=pool)))
        results = {}
        order = [0, 1, 2] * 2
        random.Random(5).shuffle(order)
        for i in order:
            n, a, program = programs[i]
            x = rng.uniform(-1, 1, n)
            results[i] = (program.replay(_encrypt(setup(n)[0], x)), a @ x)
        engine = setup(8)[0]
        for i, (out, expected) in results.items():
            assert _err(engine, out, expected) < 1e-6, f"program {i} output corrupted"


def test_a_program_keeps_the_backend_tables_its_graph_reads():
    """The graph reads cached device tables (key addresses, constants) by address. Once the
    backend's cache lets them go (its eviction past 65536 entries, here: cleared), the program
    still holds them: eager allocations cannot be handed that memory while replays read it."""
    from tests.helpers.gpu_memory import replay_over_freed_blocks

    engine, a, schedule = setup(8)
    rng = np.random.default_rng(5)
    program = CudaGraphProgram.capture(schedule, example_inputs=(_encrypt(engine, rng.uniform(-1, 1, 8)),))
    try:
        x = rng.uniform(-1, 1, 8)
        source = _encrypt(engine, x)
        want = program.replay(source, copy_output=True, synchronize=True)
        engine.backend._cache.clear()  # what an eviction does
        got = replay_over_freed_blocks(program, source, blocks=256)  # reuse freed blocks
        np.testing.assert_array_equal(got.data.get(), want.data.get())
        assert _err(engine, got, a @ x) < 1e-6
    finally:
        program.close()


@contextmanager
def _branch_streams(backend, count: int):
    """``backend.branch_streams = count`` inside the block, restored after it."""
    saved = backend.branch_streams
    backend.branch_streams = count
    try:
        yield
    finally:
        backend.branch_streams = saved


def _branches_match_one_stream(engine, schedule, a, rng) -> None:
    """Capture ``schedule`` (its independent work on several streams: parallel graph branches)
    and replay it with three new inputs: the graph equals the eager call and the eager call on
    one stream (``branch_streams = 1``), bit for bit, and decrypts to A x."""
    backend, n = engine.backend, a.shape[0]
    assert backend.branch_streams > 1
    program = CudaGraphProgram.capture(schedule, example_inputs=(_encrypt(engine, rng.uniform(-1, 1, n)),))
    try:
        for _ in range(3):
            x = rng.uniform(-1, 1, n)
            source = _encrypt(engine, x)
            replayed = program.replay(source, copy_output=True)
            eager = schedule(source)
            with _branch_streams(backend, 1):
                one_stream = schedule(source)
            np.testing.assert_array_equal(replayed.data.get(), eager.data.get())
            np.testing.assert_array_equal(eager.data.get(), one_stream.data.get())
            assert _err(engine, replayed, a @ x) < 1e-6
    finally:
        program.close()


def test_independent_rotations_in_parallel_branches_match_one_stream_bit_for_bit():
    """FHElium's independent schedule (a ModUp per rotation): its rotations run on several
    streams (CupyBackend.run_independent), in a graph as parallel branches. Replayed with
    new inputs, the graph equals the eager call and the eager call on one stream, bit for bit,
    and decrypts to A x."""
    engine, a, schedule = setup(8)
    _branches_match_one_stream(engine, partial(schedule, hoisted=False), a, np.random.default_rng(11))


def test_bsgs_giant_steps_in_parallel_branches_match_one_stream_bit_for_bit():
    """A BSGS matvec (n = 16: 3 hoisted baby rotations, 3 giant rotations): its giant steps run
    as independent tasks on several streams, parallel branches of the graph. Replayed with new
    inputs, the graph equals the eager call and the eager call on one stream, bit for bit, and
    decrypts to A x."""
    engine, _, _ = setup(8)
    n = 16
    rng = np.random.default_rng(12)
    a = rng.uniform(-1, 1, (n, n))
    schedule = partial(matrix_vector_bsgs, engine=engine, diagonals=encode_bsgs_diagonals(engine, a),
                       rotation_keys=engine.rotation_keys(required_rotation_steps_bsgs(n)))
    _branches_match_one_stream(engine, schedule, a, rng)


def _graph_roots(cuda_graph) -> list[int]:
    """The node types (CUgraphNodeType: 0 kernel, 1 memcpy, 2 memset...) of a CuPy graph's root
    nodes, from the driver API (``cuGraphGetRootNodes``, ``cuGraphNodeGetType``)."""
    lib = ctypes.CDLL("libcuda.so.1")
    count = ctypes.c_size_t(0)
    assert lib.cuGraphGetRootNodes(ctypes.c_void_p(cuda_graph.graph), None, ctypes.byref(count)) == 0
    nodes = (ctypes.c_void_p * count.value)()
    assert lib.cuGraphGetRootNodes(ctypes.c_void_p(cuda_graph.graph), nodes, ctypes.byref(count)) == 0
    types = []
    for node in nodes:
        kind = ctypes.c_int(-1)
        assert lib.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)) == 0
        types.append(kind.value)
    return types


def test_a_graph_that_starts_with_parallel_branches_replays_behind_one_root():
    """FHElium's example 18 reads its diagonals in place, so its first work is the seven
    rotations side by side: the captured graph's roots are the branches' first kernels, and
    the program launches it behind a memcpy root of its own (``RootedGraph``: with the
    branches as roots a launch costs about 4 us more host time on the H200). On one stream
    (no fork) the root is the chain's first kernel and the graph is launched as captured.
    Either way prepared and host-source replays decrypt to A x."""
    engine, a, schedule = setup(8)
    rng = np.random.default_rng(13)
    example = (_encrypt(engine, rng.uniform(-1, 1, 8)),)
    backend = engine.backend
    for streams in (backend.branch_streams, 1):
        with _branch_streams(backend, streams):
            program = CudaGraphProgram.capture(partial(schedule, hoisted=False), example_inputs=example)
        try:
            roots = _graph_roots(program.cuda_graph)
            if streams > 1:
                assert len(roots) > 1 and set(roots) == {0} and program._rooted is not None, roots
            else:
                assert roots == [0] and program._rooted is None, roots
            x = rng.uniform(-1, 1, 8)
            handle = program.copy_inputs_from(_encrypt(engine, x))
            assert _err(engine, program.replay_prepared(copy_handle=handle, copy_output=True), a @ x) < 1e-6
            x = rng.uniform(-1, 1, 8)
            host = _encrypt(engine, x).to("cpu")
            assert _err(engine, program.replay(host, copy_output=True), a @ x) < 1e-6
        finally:
            program.close()
