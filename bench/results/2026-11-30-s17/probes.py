"""The ad-hoc probes of this session's records, merged after the runs into one script with one
setup (FHElium's example 18: the 8x8 matvec at N=2^14, ``hoisted=False``). The measurements
are the ones that ran (each as its own script then; the records README names the logs).

  priority: stream priorities on the parallel branches (descending, ascending, ...), with and
            without cudaGraphInstantiateFlagUseNodePriority (ctypes: cuGraphInstantiateWithFlags)
            (`priority/`).
  parts:    the graph of the full matvec, the rotation batch alone, the seven ModUps alone, ModUp
            plus inner product, one rotation; on 8 streams and on 1 (`parts/`).
  tail:     the serial tail piece by piece (product-sum, inverse NTT, rescale); ``tail_fused``
            ran only with `fused_tail.patch` applied (`fused_tail/`).
  fill:     the NTT fill threshold crossed with the `_v4` / `_x2` knobs; a 64 x 64 BSGS matvec's
            memory on 1 and 8 streams (`fill/`).
  view:     the diagonals' Q limbs read in place (change 45) against copied per call (`view/`).
  kip:      build variants of the key inner product (FHE_KIP_GROUP, FHE_KEY_LOAD_CS) (`kip/`).
  arena:    the graph arena's chunks against the eager pool, and cudaMalloc's granularity (`arena/`).
  root:     host cost of Graph.launch with the branches as the graph's roots against one small
            kernel before the fork (`root/`).
  launch:   host cost of Graph.launch and replay_prepared with the Q limbs read in place against
            copied (`view/launch_ab.log`).

`view` and `launch` need change 45's ``engine._q_limbs`` (0233e78 .. 4221e12; reverted after).

Usage, from the repository root: python3 bench/results/2026-11-30-s17/probes.py NAME
"""

from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import alternate as alternate_rounds  # noqa: E402
from bench._example18 import copying, example18, graph_device_us  # noqa: E402
from bench._timing import device_median_us, time_host, time_host_pipelined  # noqa: E402
from fhelium_cupy.ckks import (  # noqa: E402
    encode_bsgs_diagonals,
    encode_diagonals,
    matrix_vector_bsgs,
    periodic_message,
    required_rotation_steps,
    required_rotation_steps_bsgs,
)
from fhelium_cupy.ckks._evaluation import _from_ntt_sum  # noqa: E402
from fhelium_cupy.ckks.linalg import _keys  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402

MiB = 2**20
_STREAMS: list = []
alternate = partial(alternate_rounds, digits=1)  # (these probes printed one decimal)


def probe_stream():
    """The probes' launch stream (made on first use)."""
    if not _STREAMS:
        _STREAMS.append(cupy.cuda.Stream(non_blocking=True))
    return _STREAMS[0]


def launch_us(launch: Callable[[], None], runs: int = 40) -> float:
    """Median device time of ``launch()`` on the probe stream (events), after 3 warmups."""
    return device_median_us(launch, runs=runs, warmup=3, stream=probe_stream())


def graph_us(graph) -> float:
    return graph_device_us(graph, probe_stream())


def copy_and_view_programs(engine, ct, fn, ref=None) -> dict:
    """Example 18 captured with the diagonals' Q limbs read in place (``view``, change 45's
    ``engine._q_limbs``) and copied per call (``copy``, as ``drop_special_primes`` did before);
    each replay checked against ``ref`` when given. Returns ``{name: (program, limbs)}``."""
    in_place = engine._q_limbs
    programs = {}
    for name, limbs in (("view", in_place), ("copy", copying(in_place))):
        engine._q_limbs = limbs
        program = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        if ref is not None:
            assert np.array_equal(program.replay(ct, copy_output=True, synchronize=True).data.get(), ref)
        programs[name] = (program, limbs)
    engine._q_limbs = in_place
    return programs


def priority() -> None:
    engine, _, ct, fn, ref = example18()
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_ulonglong]

    def instantiate(graph, flags: int) -> int:
        handle = ctypes.c_void_p()
        assert lib.cuGraphInstantiateWithFlags(ctypes.byref(handle), ctypes.c_void_p(graph.graph), flags) == 0
        return handle.value

    def runner(priorities: list[int]):
        streams = [cupy.cuda.Stream(non_blocking=True, priority=p) for p in priorities]
        fork, joins = cupy.cuda.Event(disable_timing=True), [cupy.cuda.Event(disable_timing=True) for _ in streams]

        def run(self, tasks) -> None:  # every task on a side stream of its own priority
            main = cupy.cuda.get_current_stream()
            fork.record(main)
            for stream in streams[:len(tasks)]:
                stream.wait_event(fork)
            self._branches.open = True
            try:
                for stream, task in zip(streams, tasks):
                    with stream:
                        task()
            finally:
                self._branches.open = False
                for stream, join in zip(streams[:len(tasks)], joins):
                    join.record(stream)
                    main.wait_event(join)
        return run

    variants = {"base": None, "flat0": [0] * 7, "desc": [-5, -4, -3, -2, -1, 0, 0], "asc": [0, 0, -1, -2, -3, -4, -5],
                "first_hi": [-5] + [0] * 6, "pairs": [-5, -5, -4, -3, -2, -1, 0]}
    backend_type, original = type(engine.backend), type(engine.backend).run_independent
    execs = {}
    for name, priorities in variants.items():
        backend_type.run_independent = original if priorities is None else runner(priorities)
        program = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        assert np.array_equal(program.replay(ct, copy_output=True, synchronize=True).data.get(), ref)
        execs[name] = (program, instantiate(program.cuda_graph, 0), instantiate(program.cuda_graph, 8))
    backend_type.run_independent = original
    names = [(name, flags) for name in variants for flags in (0, 8)]
    alternate(names, 3, lambda key: launch_us(
        lambda: cupy.cuda.runtime.graphLaunch(execs[key[0]][1 if key[1] == 0 else 2], probe_stream().ptr)))


def parts() -> None:
    engine, _, ct, fn, _ = example18()
    keys = _keys(engine.rotation_keys(required_rotation_steps(8)), range(1, 8), engine.num_slots)
    backend = engine.backend

    def modups(c, inner_product: bool = False):
        outs: list = [None] * 7

        def task(i: int):
            def run() -> None:
                digits = engine._hoisted_inputs(c, "ntt", whole=i == 0)[1]
                if inner_product:
                    _, t, d, ks, key_rows = backend._ks_inputs(digits, [keys[i].data], c.prime_ids, "probe")
                    digits, _ = backend._inner_product_launch(d, ks, [keys[i].galois_element], t, 1, key_rows)
                outs[i] = digits
            return run
        backend.run_independent([task(i) for i in range(7)])
        return outs

    fns = {"full": fn, "batch": lambda c: engine._rotation_batch(c, keys, "ntt", hoisted=False).data,
           "modups": modups, "modup_ip": partial(modups, inner_product=True),
           "rot1": lambda c: engine.rotate_with_key(c, keys[0], output_domain="ntt").data}
    programs = {}
    for streams in (8, 1):
        backend.branch_streams = streams
        for name, f in fns.items():
            programs[(name, streams)] = CudaGraphProgram.capture(f, example_inputs=(ct,))
    backend.branch_streams = 8
    alternate(list(programs), 3, lambda key: graph_us(programs[key].cuda_graph))


def tail() -> None:
    engine, a, ct, _, _ = example18()
    keys = _keys(engine.rotation_keys(required_rotation_steps(8)), range(1, 8), engine.num_slots)
    diagonals = engine.drop_special_primes(encode_diagonals(engine, a))
    batch = engine._rotation_batch(ct, keys, "ntt", hoisted=False)
    total = engine.multiply_plaintext_and_sum(batch, diagonals)
    fns = {
        "tail": (lambda b: _from_ntt_sum(engine, engine.multiply_plaintext_and_sum(b, diagonals), "coefficient",
                                         rescale=True), batch),
        "tail_ntt_out": (lambda b: _from_ntt_sum(engine, engine.multiply_plaintext_and_sum(b, diagonals), "ntt",
                                                 rescale=True), batch),
        "mulsum": (lambda b: engine.multiply_plaintext_and_sum(b, diagonals), batch),
        "intt16": (engine.ntt_domain_to_coefficient_domain, total),
        "rescale_coef": (engine.rescale_to_next_level, engine.ntt_domain_to_coefficient_domain(total)),
        "rescale_ntt": (engine.rescale_to_next_level, total),
        "tiny": (lambda t: engine.backend.add(t.data[0, :1], t.data[0, :1], t.prime_ids[:1]), total),
    }
    programs = {name: CudaGraphProgram.capture(f, example_inputs=(v,)) for name, (f, v) in fns.items()}
    alternate(list(programs), 3, lambda name: graph_us(programs[name].cuda_graph))


def fill() -> None:
    engine, _, ct, fn, ref = example18()
    backend = engine.backend
    variants = [(f, v4, x2) for f in (1056, 528, 2112, 264) for v4, x2 in ((11, 2), (0, 2), (11, 0))]
    programs = {}
    for f, v4, x2 in variants:
        backend.ntt_fill_blocks, backend._ntt_v4_max_log_chunk, backend._ntt_column_x2 = f, v4, x2
        fn(ct)
        programs[(f, v4, x2)] = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        assert np.array_equal(programs[(f, v4, x2)].replay(ct, copy_output=True, synchronize=True).data.get(), ref)
    backend.ntt_fill_blocks, backend._ntt_v4_max_log_chunk, backend._ntt_column_x2 = 1056, 11, 2
    alternate(variants, 2, lambda key: graph_us(programs[key].cuda_graph))
    for program in programs.values():
        program.close()
    rng = np.random.default_rng(0)
    n = 64
    bsgs = partial(matrix_vector_bsgs, engine=engine, diagonals=encode_bsgs_diagonals(engine, rng.uniform(-1, 1, (n, n))),
                   rotation_keys=engine.rotation_keys(required_rotation_steps_bsgs(n)))
    source = engine.encrypt_message(periodic_message(rng.uniform(-1, 1, n), engine.num_slots))
    pool = cupy.get_default_memory_pool()
    for streams in (1, 8):
        backend.branch_streams = streams
        bsgs(source)
        cupy.cuda.Device().synchronize()
        pool.free_all_blocks()
        base = pool.used_bytes()
        out = bsgs(source)
        cupy.cuda.Device().synchronize()
        grown = pool.total_bytes() - base
        del out
        program = CudaGraphProgram.capture(bsgs, example_inputs=(source,))
        arena = program._arena.reserved_bytes
        program.close()
        print(f"bsgs n=64 streams={streams} eager pool growth {grown / MiB:.1f} MiB graph arena {arena / MiB:.1f} MiB")
    backend.branch_streams = 8


def view() -> None:
    engine, _, ct, fn, ref = example18()
    programs = copy_and_view_programs(engine, ct, fn, ref)

    def eager_us() -> float:
        return time_host(lambda: fn(ct), runs=30, warmup=3, synchronize=cupy.cuda.Device().synchronize)["median_ms"] * 1e3

    def measure(key: str) -> float:
        name, what = key.split("/")
        program, engine._q_limbs = programs[name]
        return graph_us(program.cuda_graph) if what == "graph" else eager_us()

    alternate(["view/graph", "view/eager", "copy/graph", "copy/eager"], 6, measure)


def kip() -> None:
    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend
    from fhelium_cupy.runtime.kernels import KernelOptions

    engine, _, ct, fn, ref = example18()
    variants = {"default": (), "kip8": ("-DFHE_KIP_GROUP=8",), "kip2": ("-DFHE_KIP_GROUP=2",),
                "ldg": ("-DFHE_KEY_LOAD_CS=0",)}
    default, programs = engine.backend, {}
    for name, extra in variants.items():
        engine.backend = default if not extra else CupyBackend(engine.context, "cuda",
                                                               kernel_options=KernelOptions(extra=extra))
        assert np.array_equal(fn(ct).data.get(), ref)
        programs[name] = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        assert np.array_equal(programs[name].replay(ct, copy_output=True, synchronize=True).data.get(), ref)
    engine.backend = default
    alternate(list(variants), 4, lambda name: graph_us(programs[name].cuda_graph))


def arena() -> None:
    _, _, ct, fn, _ = example18()
    sizes: list[int] = []
    pool = cupy.cuda.MemoryPool()

    def spy(n: int):
        sizes.append(n)
        return pool.malloc(n)

    with cupy.cuda.using_allocator(spy):
        out = fn(ct)
        cupy.cuda.get_current_stream().synchronize()
    print(f"eager fresh pool total {pool.total_bytes() / MiB:.1f} MiB, {len(sizes)} allocations, "
          f"sum {sum(sizes) / MiB:.1f} MiB, largest {sorted(sizes)[-5:]}")
    del out
    pool.free_all_blocks()
    program = CudaGraphProgram.capture(fn, example_inputs=(ct,))
    free_list = program._arena._free
    print(f"arena reserved {program._arena.reserved_bytes / MiB:.1f} MiB in {len(free_list.sizes)} chunks "
          f"{[s // MiB for s in free_list.sizes]}")
    print(f"arena peak in use {free_list.peak_bytes / MiB:.1f} MiB, in use now {free_list.used_bytes() / MiB:.1f} MiB")
    program.close()
    for n in (9_437_184 + 512, 10 * MiB, 1 * MiB + 512, 3 * MiB + 512):
        gc.collect()
        cupy.get_default_memory_pool().free_all_blocks()
        before = cupy.cuda.runtime.memGetInfo()[0]
        memory = cupy.cuda.Memory(n)
        print(f"cudaMalloc {n} B ({n / MiB:.3f} MiB): device free fell by "
              f"{(before - cupy.cuda.runtime.memGetInfo()[0]) / MiB:.3f} MiB")
        del memory


def root() -> None:
    engine, _, ct, fn, ref = example18()
    backend_type, original = type(engine.backend), type(engine.backend).run_independent
    scratch = cupy.zeros(64, dtype=cupy.uint64)

    def with_root(self, tasks) -> None:
        scratch.fill(0)  # one small kernel on the caller's stream before the fork: the graph's single root
        original(self, tasks)

    programs = {}
    for name, run in (("multi_root", original), ("one_root", with_root)):
        backend_type.run_independent = run
        programs[name] = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        assert np.array_equal(programs[name].replay(ct, copy_output=True, synchronize=True).data.get(), ref)
    backend_type.run_independent = original
    stream = cupy.cuda.Stream(non_blocking=True)

    def measure(key: str) -> float:
        name, what = key.split("/")
        program = programs[name]
        if what == "device":
            return graph_us(program.cuda_graph)
        call = (lambda: program.cuda_graph.launch(stream)) if what == "launch" else program.replay_prepared
        drain = stream.synchronize if what == "launch" else cupy.cuda.Device().synchronize
        return time_host_pipelined(call, runs=400, warmup=20, drain=drain, every=32)["median_us"]

    alternate([f"{n}/{w}" for n in programs for w in ("launch", "prepared", "device")], 4, measure)


def launch() -> None:
    engine, _, ct, fn, _ = example18()
    programs = copy_and_view_programs(engine, ct, fn)
    stream = cupy.cuda.Stream(non_blocking=True)

    def measure(key: str) -> float:
        name, what, every = key.split("/")
        program = programs[name][0]
        if what == "launch":
            return time_host_pipelined(lambda: program.cuda_graph.launch(stream), runs=256, warmup=16,
                                       drain=stream.synchronize, every=int(every))["median_us"]
        return time_host_pipelined(program.replay_prepared, runs=256, warmup=16,
                                   drain=cupy.cuda.Device().synchronize, every=int(every))["median_us"]

    alternate([f"{n}/launch/{e}" for n in programs for e in (1, 8, 32)] + [f"{n}/prepared/8" for n in programs], 4,
              measure)


PROBES = {f.__name__: f for f in (priority, parts, tail, fill, view, kip, arena, root, launch)}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in PROBES:
        sys.exit(f"usage: probes.py {'|'.join(PROBES)}")
    PROBES[sys.argv[1]]()
