"""CudaGraphProgram on a GPU: warmup, capture, first and sequential replay, outputs, streams."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from fhelium_cupy.errors import CudaGraphInputError
from fhelium_cupy.interop import Device
from fhelium_cupy.runtime import CudaGraphCaptureStats, CudaGraphProgram, ValueTreeSignature, pin_value_tree
from tests.helpers.gpu_spin import cycles_for_ms
from tests.helpers.graph_workloads import (
    affine,
    affine_np,
    long_affine,
    random_tile,
    rawkernel_axpy,
    rawkernel_axpy_np,
    scale_value,
    tree_function,
    tree_function_np,
)
from tests.helpers.torch_cuda import torch_with_cuda
from tests.helpers.toy_values import ToyValue

pytestmark = pytest.mark.gpu




def test_capture_then_sequential_replays_match_eager_results(cp):
    rng = np.random.default_rng(0)
    x0 = cp.asarray(random_tile(rng))
    with CudaGraphProgram.capture(affine, example_inputs=(x0,)) as program:
        stats = program.stats
        assert isinstance(stats, CudaGraphCaptureStats)
        assert stats.warmup_iterations == 3
        assert min(stats.warmup_seconds, stats.capture_seconds, stats.first_replay_seconds) >= 0
        assert stats.memory_allocated_bytes >= x0.nbytes and stats.memory_reserved_bytes >= stats.memory_allocated_bytes
        assert program.device == Device("cuda", x0.device.id)
        assert program.input_signature == ValueTreeSignature.from_value((x0,))
        assert program.input_signature.kind == "tuple"
        assert program.input_nbytes == x0.nbytes
        assert isinstance(program.cuda_graph, cp.cuda.Graph)
        # the first replay ran the prototype
        np.testing.assert_array_equal(cp.asnumpy(program.output), affine_np(cp.asnumpy(x0)))
        ptr = program.output.data.ptr
        for _ in range(5):
            host = random_tile(rng)
            out = program.replay(cp.asarray(host))
            assert out.data.ptr == ptr
            np.testing.assert_array_equal(cp.asnumpy(out), affine_np(host))


def test_rawkernel_workload_with_two_inputs_replays_exactly(cp):
    rng = np.random.default_rng(1)
    x, y = cp.asarray(random_tile(rng, (3000,))), cp.asarray(random_tile(rng, (3000,)))
    program = CudaGraphProgram.capture(rawkernel_axpy, example_inputs=(x, y), warmup=1)
    for _ in range(4):
        hx, hy = random_tile(rng, (3000,)), random_tile(rng, (3000,))
        out = program.replay(hx, cp.asarray(hy))
        np.testing.assert_array_equal(cp.asnumpy(out), rawkernel_axpy_np(hx, hy))
    program.close()


def test_value_outputs_are_fresh_wrappers_around_stable_arrays(cp):
    rng = np.random.default_rng(2)
    v0 = ToyValue(cp.asarray(rng.integers(0, 1000, size=(2, 64), dtype=np.int64)), level=1)
    program = CudaGraphProgram.capture(scale_value, example_inputs=(v0,))
    host = rng.integers(0, 1000, size=(2, 64), dtype=np.int64)
    first = program.replay(ToyValue(host, level=1))
    second = program.replay_prepared()
    assert isinstance(first, ToyValue) and first.level == 2
    assert first is not second  # FHElium bug 7.5: never the same mutable object
    assert first.data is second.data  # ... but the same fixed graph array
    first.level = 99  # mutating a returned wrapper cannot corrupt the program
    assert program.output.level == 2
    np.testing.assert_array_equal(cp.asnumpy(program.output.data), host * 3)
    with pytest.raises(CudaGraphInputError, match="level"):
        program.replay(ToyValue(host, level=2))
    program.close()


def test_nested_trees_with_none_and_values(cp):
    rng = np.random.default_rng(3)

    def example():
        a, b = rng.standard_normal((2, 8)), rng.standard_normal((2, 8))
        v = rng.integers(0, 50, size=(3,), dtype=np.int64)
        return ({"a": a, "b": b}, [ToyValue(v)])

    host = example()
    device_inputs = ({k: cp.asarray(v) for k, v in host[0].items()}, [ToyValue(cp.asarray(host[1][0].data))])
    program = CudaGraphProgram.capture(tree_function, example_inputs=device_inputs, warmup=2)
    for _ in range(3):
        host = example()
        out = program.replay(*host)
        expected = tree_function_np(host[0], [host[1][0]])
        np.testing.assert_array_equal(cp.asnumpy(out["sum"]), expected["sum"])
        np.testing.assert_array_equal(cp.asnumpy(out["pair"][0]), expected["pair"][0])
        assert out["pair"][1] is None
        np.testing.assert_array_equal(cp.asnumpy(out["value"].data), expected["value"])
    program.close()


def test_decorator_form_returns_a_ready_program(cp):
    x = cp.arange(16, dtype=cp.float64)

    @CudaGraphProgram.capture(example_inputs=(x,), warmup=1)
    def doubled(source):
        return source * 2

    assert isinstance(doubled, CudaGraphProgram)
    np.testing.assert_array_equal(cp.asnumpy(doubled.replay(np.ones(16))), np.full(16, 2.0))
    doubled.close()


def test_partial_bound_static_state_is_kept_alive(cp):
    weights = cp.arange(8, dtype=cp.float32)

    def scaled(w, x):
        return w * x

    program = CudaGraphProgram.capture(functools.partial(scaled, weights), example_inputs=(cp.ones(8, cp.float32),))
    del weights  # the program keeps the partial, and so the array, alive
    cp.get_default_memory_pool().free_all_blocks()
    out = program.replay(np.full(8, 2, np.float32))
    np.testing.assert_array_equal(cp.asnumpy(out), np.arange(8, dtype=np.float32) * 2)
    program.close()


def test_borrowed_output_is_overwritten_and_owned_output_is_not(cp):
    rng = np.random.default_rng(4)
    program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros((4, 1024), cp.float32),))
    h1, h2 = random_tile(rng), random_tile(rng)
    borrowed = program.replay(h1)
    owned = program.replay(h1, copy_output=True)
    assert owned.data.ptr != program.output.data.ptr
    assert isinstance(owned, cp.ndarray) and owned.strides == program.output.strides
    program.replay(h2, synchronize=True)
    np.testing.assert_array_equal(cp.asnumpy(owned), affine_np(h1))
    np.testing.assert_array_equal(cp.asnumpy(borrowed), affine_np(h2))  # overwritten by the next replay
    program.close()
    np.testing.assert_array_equal(cp.asnumpy(owned), affine_np(h1))  # owned storage outlives the program


@pytest.mark.parametrize("source_kind", ["cupy", "numpy", "pinned"])
def test_replay_accepts_cuda_pageable_and_pinned_sources(cp, source_kind):
    rng = np.random.default_rng(5)
    program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros((4, 1024), cp.float32),), warmup=1)
    for _ in range(3):
        host = random_tile(rng)
        source = {"cupy": cp.asarray, "numpy": lambda a: a, "pinned": pin_value_tree}[source_kind](host)
        np.testing.assert_array_equal(cp.asnumpy(program.replay(source)), affine_np(host))
    program.close()


def test_pinned_copy_on_transfer_stream_never_overwrites_a_running_replay(cp):
    """Overwrite protection: a copy issued during a long replay waits for it."""
    rng = np.random.default_rng(6)
    cycles = cycles_for_ms(50)
    program = CudaGraphProgram.capture(long_affine(cycles), example_inputs=(cp.zeros((4, 1024), cp.float32),), warmup=1)
    transfer = cp.cuda.Stream(non_blocking=True)
    compute = cp.cuda.Stream(non_blocking=True)
    h1, h2 = random_tile(rng), random_tile(rng)
    p1, p2 = pin_value_tree(h1), pin_value_tree(h2)
    with compute:
        first = program.replay(p1, copy_output=True)  # spins ~50 ms, then reads its input
    handle = program.copy_inputs_from(p2, stream=transfer)
    assert not handle.query()  # still waiting for the running replay
    with compute:
        second = program.replay_prepared(copy_handle=handle, copy_output=True)
    compute.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(first), affine_np(h1))
    np.testing.assert_array_equal(cp.asnumpy(second), affine_np(h2))
    program.close()


def test_prefetch_overlaps_transfer_with_compute_and_results_are_right(cp):
    """Double-buffer style: prefetch tile i+1 on a transfer stream while compute runs tile i."""
    rng = np.random.default_rng(7)
    program = CudaGraphProgram.capture(long_affine(cycles_for_ms(5)), example_inputs=(cp.zeros((4, 1024), cp.float32),), warmup=1)
    transfer = cp.cuda.Stream(non_blocking=True)
    compute = cp.cuda.Stream(non_blocking=True)
    hosts = [random_tile(rng) for _ in range(6)]
    pinned = [pin_value_tree(h) for h in hosts]
    results = []
    handle = program.copy_inputs_from(pinned[0], stream=transfer)
    for i in range(len(hosts)):
        with compute:
            results.append(program.replay_prepared(copy_handle=handle, copy_output=True))
        if i + 1 < len(hosts):
            handle = program.copy_inputs_from(pinned[i + 1], stream=transfer)
    compute.synchronize()
    for host, out in zip(hosts, results):
        np.testing.assert_array_equal(cp.asnumpy(out), affine_np(host))
    program.close()


def test_replay_prepared_handle_rules(cp):
    x = cp.zeros(256, cp.float32)
    program = CudaGraphProgram.capture(affine, example_inputs=(x,), warmup=1)
    other = CudaGraphProgram.capture(affine, example_inputs=(x,), warmup=1)
    # no outstanding copy: re-runs the current payload
    np.testing.assert_array_equal(cp.asnumpy(program.replay_prepared(synchronize=True)), np.ones(256, np.float32))
    stale = program.copy_inputs_from(np.full(256, 1, np.float32))
    latest = program.copy_inputs_from(np.full(256, 2, np.float32))
    with pytest.raises(CudaGraphInputError, match="latest CopyHandle"):
        program.replay_prepared(copy_handle=stale)
    with pytest.raises(CudaGraphInputError, match="outstanding"):
        program.replay_prepared()
    with pytest.raises(CudaGraphInputError, match="latest CopyHandle"):
        program.replay_prepared(copy_handle=other.copy_inputs_from(np.zeros(256, np.float32)))
    out = program.replay_prepared(copy_handle=latest)
    np.testing.assert_array_equal(cp.asnumpy(out), np.full(256, 5, np.float32))
    with pytest.raises(CudaGraphInputError, match="latest CopyHandle"):
        program.replay_prepared(copy_handle=latest)  # consumed
    # a successful replay supersedes an outstanding prepared copy
    pending = program.copy_inputs_from(np.full(256, 7, np.float32))
    np.testing.assert_array_equal(cp.asnumpy(program.replay(np.full(256, 3, np.float32))), np.full(256, 7, np.float32))
    with pytest.raises(CudaGraphInputError):
        program.replay_prepared(copy_handle=pending)
    program.close()
    other.close()


def test_mismatched_inputs_fail_before_anything_moves(cp):
    program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(64, cp.float32),), warmup=1)
    program.replay(np.full(64, 4, np.float32), synchronize=True)
    for bad in (np.zeros(65, np.float32), np.zeros(64, np.float64), [np.zeros(64, np.float32)], np.zeros(128, np.float32)[::2]):
        with pytest.raises(CudaGraphInputError, match="source"):
            program.replay(bad)
        with pytest.raises(CudaGraphInputError):
            program.copy_inputs_from(bad)
    with pytest.raises(CudaGraphInputError, match="length"):
        program.replay(np.zeros(64, np.float32), np.zeros(64, np.float32))
    # the payload is still the last good one
    np.testing.assert_array_equal(cp.asnumpy(program.replay_prepared(synchronize=True)), np.full(64, 9, np.float32))
    program.close()


def test_stats_memory_fields_are_process_allocator_snapshots(cp):
    """The spec: "Memory fields are process allocator snapshots, not graph-exclusive
    incremental footprints": an eager array live during capture counts, and so does the
    graph arena of this and of every other open program on the device."""
    import gc

    from fhelium_cupy.runtime.memory import memory_snapshot

    gc.collect()  # arenas of programs earlier tests dropped without closing
    baseline = memory_snapshot(Device("cuda", cp.cuda.runtime.getDevice())).arena_reserved_bytes
    example = cp.zeros(1 << 16)  # kept alive: the snapshot below must see the same arrays
    other = CudaGraphProgram.capture(affine, example_inputs=(example,), warmup=1)
    eager = cp.zeros(64 << 20, dtype=cp.uint8)  # 64 MiB from CuPy's pool
    program = CudaGraphProgram.capture(affine, example_inputs=(example,), warmup=1)
    stats = program.stats
    pool = cp.get_default_memory_pool()
    arenas = program._arena.reserved_bytes + other._arena.reserved_bytes
    assert stats.memory_allocated_bytes >= eager.nbytes + program._arena.used_bytes + other._arena.used_bytes
    assert stats.memory_reserved_bytes >= pool.used_bytes() + arenas
    assert stats.memory_reserved_bytes >= stats.memory_allocated_bytes
    now = memory_snapshot(program.device)  # nothing allocated since the capture's snapshot
    assert (now.allocated_bytes, now.reserved_bytes) == (stats.memory_allocated_bytes, stats.memory_reserved_bytes)
    assert now.arena_reserved_bytes == baseline + arenas
    del eager
    program.close()
    other.close()
    assert memory_snapshot(program.device).arena_reserved_bytes == baseline  # closed arenas leave it


def test_allocation_storm_between_replays_leaves_graph_and_eager_memory_intact(cp):
    """DESIGN decision 3: eager allocations never receive graph memory, and vice versa."""
    rng = np.random.default_rng(8)
    pool = cp.get_default_memory_pool()
    examples = (cp.zeros(1 << 16, cp.float32), cp.zeros(1 << 16, cp.float32))
    program = CudaGraphProgram.capture(rawkernel_axpy, example_inputs=examples)
    hx, hy = random_tile(rng, (1 << 16,)), random_tile(rng, (1 << 16,))
    out = program.replay(hx, hy, synchronize=True)
    expected = rawkernel_axpy_np(hx, hy)
    for round_ in range(3):
        junk = [cp.full(int(n), round_ + 7, dtype=cp.uint8) for n in rng.integers(1, 1 << 20, size=64)]
        del junk
        pool.free_all_blocks()
        victims = [cp.full(1 << 16, float(i), dtype=cp.float32) for i in range(32)]
        np.testing.assert_array_equal(cp.asnumpy(out), expected)  # graph output untouched by eager work
        hx, hy = random_tile(rng, (1 << 16,)), random_tile(rng, (1 << 16,))
        out = program.replay(hx, hy, synchronize=True)
        expected = rawkernel_axpy_np(hx, hy)
        np.testing.assert_array_equal(cp.asnumpy(out), expected)
        for i, victim in enumerate(victims):  # replay never wrote into eager memory
            assert bool((victim == float(i)).all())
    program.close()


def test_replay_follows_the_callers_current_stream_and_device(cp):
    rng = np.random.default_rng(9)
    program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(512, cp.float32),), warmup=1)
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(3)]
    outs = []
    hosts = [random_tile(rng, (512,)) for _ in range(6)]
    for i, host in enumerate(hosts):
        with streams[i % 3]:
            outs.append(program.replay(host, copy_output=True))
    cp.cuda.runtime.deviceSynchronize()
    for host, out in zip(hosts, outs):
        np.testing.assert_array_equal(cp.asnumpy(out), affine_np(host))
    program.close()


def test_torch_tensors_in_and_out(cp):
    torch = torch_with_cuda()

    def torch_affine(t):
        return torch.from_dlpack(affine(cp.from_dlpack(t)))

    example = torch.zeros(4, 256, device="cuda", dtype=torch.float32)
    program = CudaGraphProgram.capture(torch_affine, example_inputs=(example,), warmup=2)
    for source in (torch.randn(4, 256, device="cuda"), torch.randn(4, 256)):
        torch.cuda.synchronize()
        out = program.replay(source, synchronize=True)
        assert isinstance(out, torch.Tensor) and out.is_cuda
        torch.testing.assert_close(out.cpu(), source.cpu() * 2 + 1, rtol=0, atol=0)
    before = program.output._version
    program.replay(torch.ones(4, 256), synchronize=True)
    assert program.output._version > before  # each launch rewrites it, as an in-place op would
    owned = program.replay(torch.ones(4, 256), copy_output=True, synchronize=True)
    assert isinstance(owned, torch.Tensor) and owned.data_ptr() != program.output.data_ptr()
    torch.testing.assert_close(owned.cpu(), torch.full((4, 256), 3.0), rtol=0, atol=0)
    ts = torch.cuda.Stream()
    handle = program.copy_inputs_from(torch.full((4, 256), 2.0), stream=ts)
    with torch.cuda.stream(ts):
        out = program.replay_prepared(copy_handle=handle)
    ts.synchronize()
    torch.testing.assert_close(out.cpu(), torch.full((4, 256), 5.0), rtol=0, atol=0)
    program.close()


def test_torch_events_are_accepted_as_dependencies(cp):
    torch = torch_with_cuda()
    program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(64, cp.float32),), warmup=1)
    producer = torch.cuda.Stream()
    with torch.cuda.stream(producer):
        source = torch.full((64,), 4.0, device="cuda")
        ready = torch.cuda.Event()
        ready.record()
    handle = program.copy_inputs_from(source, wait_for=[ready])
    out = program.replay_prepared(copy_handle=handle, synchronize=True)
    np.testing.assert_array_equal(cp.asnumpy(out), np.full(64, 9, np.float32))
    program.close()


def test_stats_report_graph_private_memory(cp):
    n = 1 << 20
    program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(n, cp.float32),), warmup=1)
    stats = program.stats
    # input buffer + the live output block; the arena reserves at least the output and the temporary
    assert stats.memory_allocated_bytes >= 2 * n * 4
    assert stats.memory_reserved_bytes >= stats.memory_allocated_bytes
    program.close()
    assert program.stats is stats


def test_a_captured_branch_never_receives_a_block_another_branch_freed(cp):
    """A capture that forks onto a side stream (fork and join events: two parallel branches of
    the graph): a temporary freed on the side branch is not handed to the main branch, whose
    work runs beside it, and the replayed values are exact."""
    side = cp.cuda.Stream(non_blocking=True)
    fork, join = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)
    pointers: dict[str, int] = {}

    def two_branches(x):
        main = cp.cuda.get_current_stream()
        fork.record(main)
        side.wait_event(fork)
        with side:
            t = x * 2.0  # a side-branch temporary, freed inside the branch
            pointers["side"] = t.data.ptr
            y = t + 1.0
            del t
        u = x * 3.0  # same size, on the main branch
        pointers["main"] = u.data.ptr
        z = u + 1.0
        join.record(side)
        main.wait_event(join)
        return y + z

    rng = np.random.default_rng(7)
    x0 = cp.asarray(random_tile(rng))
    with CudaGraphProgram.capture(two_branches, example_inputs=(x0,)) as program:
        assert pointers["main"] != pointers["side"]  # (the last call was the capture)
        for _ in range(3):
            host = random_tile(rng)
            want = (host * np.float32(2) + np.float32(1)) + (host * np.float32(3) + np.float32(1))
            np.testing.assert_array_equal(cp.asnumpy(program.replay(cp.asarray(host))), want)


# -- replay of device sources through the input-copy nodes (runtime._graph_execs) --------


def test_device_sources_replay_through_input_nodes_updated_only_when_their_address_changes(cp):
    """Device sources: the graph copies them itself (memcpy nodes pointed at each replay's
    sources, one of several executables per address). Every replay reads the source's
    values at that moment, an address an executable holds costs no update, and host
    sources, prepared copies and the captured graph itself interleave with it, every
    output exact."""
    rng = np.random.default_rng(11)
    a, b = cp.asarray(random_tile(rng)), cp.asarray(random_tile(rng))
    with CudaGraphProgram.capture(affine, example_inputs=(a,)) as program:
        nodes = program._input_nodes
        assert nodes is not None, "the driver's input-copy nodes should build on a GPU machine"
        before = nodes.updates
        for source in (a, b, a):
            np.testing.assert_array_equal(cp.asnumpy(program.replay(source)), affine_np(cp.asnumpy(source)))
        assert nodes.updates == before + 2  # a, b, a: the second a finds the executable pointed at it
        a += 5  # same address, new values: no update, and the copy still reads them
        np.testing.assert_array_equal(cp.asnumpy(program.replay(a)), affine_np(cp.asnumpy(a)))
        assert nodes.updates == before + 2
        sources = [cp.asarray(random_tile(rng)) for _ in range(nodes.EXECUTABLES + 1)]
        for source in sources * 2:  # more arrays than executables: each replay repoints one, all exact
            np.testing.assert_array_equal(cp.asnumpy(program.replay(source)), affine_np(cp.asnumpy(source)))
        host = random_tile(rng)
        np.testing.assert_array_equal(cp.asnumpy(program.replay(host)), affine_np(host))  # cudaMemcpyAsync
        handle = program.copy_inputs_from(b)
        np.testing.assert_array_equal(cp.asnumpy(program.replay_prepared(copy_handle=handle)), affine_np(cp.asnumpy(b)))
        program.cuda_graph.launch()  # the captured graph: no copy nodes, the payload in place (b)
        np.testing.assert_array_equal(cp.asnumpy(program.output), affine_np(cp.asnumpy(b)))
        np.testing.assert_array_equal(cp.asnumpy(program.replay(a)), affine_np(cp.asnumpy(a)))
        assert program._input_nodes is nodes  # never refused


def test_a_tree_of_device_sources_is_one_node_per_leaf(cp):
    rng = np.random.default_rng(12)

    def tree(a_b):
        return {"sum": a_b["a"] + a_b["b"], "twice": a_b["a"] * 2}

    example = {"a": cp.asarray(random_tile(rng)), "b": cp.asarray(random_tile(rng))}
    with CudaGraphProgram.capture(tree, example_inputs=(example,)) as program:
        assert program._input_nodes is not None and len(program._input_nodes._nodes) == 2
        for _ in range(3):
            ha, hb = random_tile(rng), random_tile(rng)
            out = program.replay({"a": cp.asarray(ha), "b": cp.asarray(hb)})
            np.testing.assert_array_equal(cp.asnumpy(out["sum"]), ha + hb)
            np.testing.assert_array_equal(cp.asnumpy(out["twice"]), ha * 2)


def test_torch_cuda_sources_take_the_input_nodes(cp):
    torch = torch_with_cuda()
    rng = np.random.default_rng(13)
    x = cp.asarray(random_tile(rng))
    with CudaGraphProgram.capture(affine, example_inputs=(x,)) as program:
        before = program._input_nodes.updates
        host = random_tile(rng)
        source = torch.as_tensor(host, device=f"cuda:{x.device.id}")
        torch.cuda.synchronize()  # (produced on torch's stream: ready before the replay)
        np.testing.assert_array_equal(cp.asnumpy(program.replay(source)), affine_np(host))
        assert program._input_nodes.updates == before + 1


def test_input_nodes_switched_off_keep_the_copies(cp, monkeypatch):
    from fhelium_cupy.runtime import _graph_execs

    monkeypatch.setenv(_graph_execs.ENV_SWITCH, "0")
    rng = np.random.default_rng(14)
    with CudaGraphProgram.capture(affine, example_inputs=(cp.asarray(random_tile(rng)),)) as program:
        assert program._input_nodes is None
        host = random_tile(rng)
        np.testing.assert_array_equal(cp.asnumpy(program.replay(cp.asarray(host))), affine_np(host))


# -- a graph whose first work is a fork (runtime._graph_execs.RootedGraph) -----------------


def _root_count(cuda_graph) -> int:
    from fhelium_cupy.runtime import _graph_execs

    return _graph_execs.root_count(_graph_execs.driver(), cuda_graph.graph)


def test_a_fork_first_graph_replays_behind_one_root_with_exact_values(cp, monkeypatch):
    """A function whose first work is a fork onto a side stream captures a graph with two
    roots; the program launches it behind a memcpy root of its own for replay_prepared() and
    host sources (device sources: the input-copy executables), every output exact; with the
    root switched off the captured graph is launched as it is, with the same values."""
    from fhelium_cupy.runtime import _graph_execs

    side = cp.cuda.Stream(non_blocking=True)
    fork, join = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)

    def fork_first(x):
        main = cp.cuda.get_current_stream()
        fork.record(main)  # (the input copy precedes the capture: no work before the fork)
        side.wait_event(fork)
        with side:
            y = x * 2.0 + 1.0
        z = x * 3.0 - 1.0
        join.record(side)
        main.wait_event(join)
        return y + z

    def want(host):
        return (host * np.float32(2) + np.float32(1)) + (host * np.float32(3) - np.float32(1))

    rng = np.random.default_rng(15)
    for switch in ("1", "0"):
        monkeypatch.setenv(_graph_execs.ROOT_SWITCH, switch)
        with CudaGraphProgram.capture(fork_first, example_inputs=(cp.asarray(random_tile(rng)),)) as program:
            assert _root_count(program.cuda_graph) == 2
            assert (program._rooted is not None) == (switch == "1")
            for _ in range(2):
                host = random_tile(rng)
                handle = program.copy_inputs_from(host)
                np.testing.assert_array_equal(cp.asnumpy(program.replay_prepared(copy_handle=handle)), want(host))
                host = random_tile(rng)
                np.testing.assert_array_equal(cp.asnumpy(program.replay(host)), want(host))
                host = random_tile(rng)
                np.testing.assert_array_equal(cp.asnumpy(program.replay(cp.asarray(host))), want(host))
            rooted = program._rooted
        assert program._rooted is None and (rooted is None or rooted._handles == [0, 0, 0])  # released by close()


def test_a_graph_with_one_root_launches_as_captured(cp):
    rng = np.random.default_rng(16)
    with CudaGraphProgram.capture(affine, example_inputs=(cp.asarray(random_tile(rng)),)) as program:
        assert _root_count(program.cuda_graph) == 1 and program._rooted is None
        host = random_tile(rng)
        np.testing.assert_array_equal(cp.asnumpy(program.replay(host)), affine_np(host))
