"""FHElium's example 18 for the GPU probes under ``bench/results/``: the 8x8 encrypted matvec at
N=2^14 (``slots8192-scale40-depth7``) with its independent rotations (``hoisted=False``), and
the side-by-side helpers those probes share (alternated rounds, graph device and launch host
time). GPU only; CuPy and the engine are imported when called.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from bench._timing import alternated_rounds, device_median_us, time_host_pipelined

PRESET = "slots8192-scale40-depth7"


def example18(n: int = 8, *, seed: int = 0) -> tuple[Any, np.ndarray, Any, Any, np.ndarray]:
    """``(engine, A, encrypted x, the schedule, its eager result on the host)``: a fresh GPU
    engine with keys, ``A`` and ``x`` uniform in [-1, 1) from ``seed``, the schedule a
    ``partial`` of ``matrix_vector`` taking the ciphertext."""
    from fhelium_cupy.ckks import CkksEngine, encode_diagonals, matrix_vector, periodic_message, required_rotation_steps

    engine = CkksEngine(PRESET, device="cuda")
    engine.generate_keys()
    rng = np.random.default_rng(seed)
    a, x = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, n)
    ct = engine.encrypt_message(periodic_message(x, engine.num_slots))
    fn = partial(matrix_vector, engine=engine, diagonals=encode_diagonals(engine, a),
                 rotation_keys=engine.rotation_keys(required_rotation_steps(n)), hoisted=False)
    return engine, a, ct, fn, fn(ct).data.get()


def built_backend(engine: Any, *defines: str) -> Any:
    """A fresh ``CupyBackend`` of ``engine``'s context whose kernels are built with ``defines``
    (``-DNAME=VALUE`` build variants, ``runtime.kernels.KernelOptions``)."""
    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend
    from fhelium_cupy.runtime.kernels import KernelOptions

    return CupyBackend(engine.context, "cuda", kernel_options=KernelOptions(extra=defines))


def two_launch_backend(engine: Any) -> Any:
    """``built_backend(engine)`` without ``rotate_keyswitch``'s fused form (it declines, so each
    rotation runs its ModUp and inner product as two launches: the code before change 48)."""
    backend = built_backend(engine)
    backend.rotate_keyswitch = lambda *args, **kwargs: None
    return backend


def backend_switch(engine: Any, variants: dict[str, Any]) -> tuple[Callable[[str], None], Callable[[], None]]:
    """``(use, restore)`` for ``capture_checked`` and ``variant_measure``: ``use(name)`` puts
    ``variants[name]`` in as ``engine.backend``, ``restore()`` the engine's own backend again."""
    default = engine.backend

    def use(name: str) -> None:
        engine.backend = variants[name]

    def restore() -> None:
        engine.backend = default

    return use, restore


def capture_checked(names: Sequence[str], use: Callable[[str], None], restore: Callable[[], None], fn: Any, ct: Any,
                    ref: np.ndarray, *, prefix: str = "") -> dict[str, Any]:
    """Variants of one schedule captured and checked: for each name ``use(name)`` (the probe's
    switch: a backend, a method), ``fn(ct)`` eager must equal ``ref`` bit for bit, the capture,
    then ``restore()`` (also when a check fails); the replay must equal ``ref`` too. Returns the
    ``CudaGraphProgram`` of each name and prints a line each."""
    from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

    programs = {}
    for name in names:
        use(name)
        try:
            assert np.array_equal(fn(ct).data.get(), ref), name
            programs[name] = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        finally:
            restore()
        assert np.array_equal(programs[name].replay(ct, copy_output=True, synchronize=True).data.get(), ref), name
        print(f"{prefix}{name}: eager and graph bit-identical to the code's eager call", flush=True)
    return programs


def variant_measure(programs: dict[str, Any], use: Callable[[str], None], restore: Callable[[], None], fn: Any,
                    ct: Any, stream: Any) -> Callable[[str], float]:
    """``measure(key)`` for ``alternate`` over ``capture_checked``'s programs: ``"NAME device_us"``
    (``graph_device_us``), ``"NAME launch_us"`` (``launch_host_us``, drained every 8 launches) or
    ``"NAME eager_ms"`` (``fn(ct)`` eager with ``use(NAME)``, median of 30 after 3 warmups, then
    ``restore()``)."""
    from bench._timing import cuda_sync, time_host

    def measure(key: str) -> float:
        name, what = key.split()
        if what == "device_us":
            return graph_device_us(programs[name].cuda_graph, stream)
        if what == "launch_us":
            return launch_host_us(programs[name].cuda_graph, stream, 8)
        if what != "eager_ms":
            raise ValueError(f"unknown measurement {what!r}")
        use(name)
        try:
            return time_host(lambda: fn(ct), runs=30, warmup=3, synchronize=cuda_sync)["median_ms"]
        finally:
            restore()

    return measure


def compare_backends(engine: Any, variants: dict[str, Any], fn: Any, ct: Any, ref: np.ndarray,
                     measurements: Sequence[str], *, rounds: int = 4) -> dict:
    """The backend probes' side-by-side run: each of ``variants`` (name -> backend) put in as
    ``engine.backend`` in turn (``backend_switch``), checked and captured
    (``capture_checked``), then ``measurements`` (``variant_measure`` keys: ``"NAME
    device_us"``, ``"NAME launch_us"``, ``"NAME eager_ms"``) alternated over ``rounds``
    (``alternate``, 3 digits; graphs launched on a fresh non-blocking stream). Returns
    ``alternate``'s values."""
    import cupy

    use, restore = backend_switch(engine, variants)
    programs = capture_checked(list(variants), use, restore, fn, ct, ref)
    measure = variant_measure(programs, use, restore, fn, ct, cupy.cuda.Stream(non_blocking=True))
    return alternate(list(measurements), rounds, measure, digits=3)


def alternate(names: Sequence[Any], rounds: int, measure: Callable[[Any], float], *, digits: int = 2) -> dict:
    """``measure(name)`` for every name, ``rounds`` times, every other round in reverse order
    (``bench._timing.alternated_rounds``; side by side in one process), each value rounded to
    ``digits``; prints each name's values and median, returns ``{str(name): values}``."""
    results: dict[str, list[float]] = {}
    for order in alternated_rounds(names, rounds):
        for name in order:
            results.setdefault(str(name), []).append(round(measure(name), digits))
    for name, values in results.items():
        print(f"{name:<28} {values} median {statistics.median(values):.{digits}f}", flush=True)
    return results


def graph_device_us(graph: Any, stream: Any) -> float:
    """Median device µs of ``graph.launch(stream)`` (CUDA events, 40 runs after 3 warmups)."""
    return device_median_us(lambda: graph.launch(stream), runs=40, warmup=3, stream=stream)


def launch_host_us(graph: Any, stream: Any, every: int) -> float:
    """Median host µs of ``graph.launch(stream)`` issued back to back, the stream drained every
    ``every`` launches (256 runs after 16 warmups)."""
    return time_host_pipelined(lambda: graph.launch(stream), runs=256, warmup=16, drain=stream.synchronize,
                               every=every)["median_us"]


def copying(q_limbs: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``engine._q_limbs`` as the code before change 46 used it: the Q limbs copied (a CuPy
    copy kernel at the graph's head) instead of read in place; ``q_limbs`` is the engine's
    own method, saved before the probe replaces it."""
    import cupy

    def copied(pt: Any) -> Any:
        q = q_limbs(pt)
        return q._with_data(cupy.ascontiguousarray(q.data))

    return copied
