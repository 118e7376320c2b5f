"""The side-by-side helpers the GPU probes under bench/results/ share (bench/_example18.py),
the paired ratio of bench/_timing.py and the round order both take from bench/_timing.py
(no GPU)."""

from __future__ import annotations

import importlib.util
import json

import pytest

import bench._timing as timing
from bench._example18 import alternate
from bench.run_all import _paired


def test_alternate_reverses_every_other_round_and_reports_each_name(capsys):
    calls: list[str] = []

    def measure(name: str) -> float:
        calls.append(name)
        return len(calls) + 0.123456

    results = alternate(["a", "b", "c"], 3, measure, digits=3)
    assert calls == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert results == {"a": [1.123, 6.123, 7.123], "b": [2.123, 5.123, 8.123], "c": [3.123, 4.123, 9.123]}
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("a") and out[0].endswith("median 6.123") and len(out) == 3


def test_alternated_rounds_reverses_every_other_round():
    assert list(timing.alternated_rounds(["a", "b", "c"], 4)) == [
        ["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"], ["c", "b", "a"]]
    assert list(timing.alternated_rounds((1, 2), 3)) == [(1, 2), (2, 1), (1, 2)]
    assert list(timing.alternated_rounds(["a"], 0)) == [] and list(timing.alternated_rounds(["a"], -1)) == []


def test_alternate_and_paired_ratio_take_the_same_round_order(monkeypatch, capsys):
    """Both users over five rounds, fake callables recording their calls: ``alternate`` runs the
    names, ``paired_ratio`` the host loop then ``slow`` and ``fast``, in ``alternated_rounds``
    order (the second and fourth rounds reversed)."""
    import bench._example18 as example18

    assert example18.alternated_rounds is timing.alternated_rounds  # one helper, not a copy
    calls: list[str] = []
    results = alternate(["x", "y"], 5, lambda name: calls.append(name) or 1.0)
    assert calls == ["x", "y", "y", "x", "x", "y", "y", "x", "x", "y"]
    assert results == {"x": [1.0] * 5, "y": [1.0] * 5}
    assert len(capsys.readouterr().out.splitlines()) == 2

    calls.clear()
    monkeypatch.setattr(timing, "host_loop_us", lambda: calls.append("loop") or 1.0)
    monkeypatch.setattr(timing, "time_host", lambda fn, **kwargs: {"median_ms": fn()})
    result = timing.paired_ratio(lambda: calls.append("slow") or 3.0, lambda: calls.append("fast") or 2.0,
                                 rounds=5, runs=1)
    assert calls == ["loop", "slow", "fast", "loop", "fast", "slow", "loop", "slow", "fast",
                     "loop", "fast", "slow", "loop", "slow", "fast"]
    assert result["rounds"] == [{"host_loop_us": 1.0, "slow_ms": 3.0, "fast_ms": 2.0, "ratio": 1.5}] * 5
    assert (result["median_ratio"], result["min_ratio"], result["max_ratio"]) == (1.5, 1.5, 1.5)


class _FakeClock:
    """``time.perf_counter`` that moves only when a timed function says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_paired_ratio_times_both_in_every_round_alternating_the_order(monkeypatch):
    clock = _FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    calls: list[str] = []
    slow_ms = iter([5.0, 5.0, 6.0, 6.0, 4.0, 4.0])  # per round: one warmup + one sample

    def slow() -> None:
        calls.append("slow")
        clock.now += next(slow_ms) / 1e3

    def fast() -> None:
        calls.append("fast")
        clock.now += 1e-3

    result = timing.paired_ratio(slow, fast, rounds=3, runs=1)
    assert calls == ["slow", "slow", "fast", "fast", "fast", "fast", "slow", "slow", "slow", "slow", "fast", "fast"]
    assert [round(row["ratio"], 9) for row in result["rounds"]] == [5.0, 6.0, 4.0]
    assert round(result["median_ratio"], 9) == 5.0
    assert (round(result["min_ratio"], 9), round(result["max_ratio"], 9)) == (4.0, 6.0)
    assert all(row["host_loop_us"] == 0.0 for row in result["rounds"])  # the fake clock stood still
    text = _paired(result)
    assert text.startswith("5.00x (4.00-6.00) @ 0-0")
    assert _paired(None) == "-" and _paired({"rounds": []}) == "-"


@pytest.mark.parametrize(("rounds", "runs"), [(0, 3), (2, 0)])
def test_paired_ratio_rejects_empty_rounds(rounds, runs):
    with pytest.raises(ValueError, match="rounds and runs must be >= 1"):
        timing.paired_ratio(lambda: None, lambda: None, rounds=rounds, runs=runs)


def test_host_loop_us_is_a_positive_time():
    assert timing.host_loop_us(runs=3) > 0


def test_quiet_cpu_ranks_the_given_cpus_and_restores_the_affinity():
    import os

    from bench.quiet_cpu import quickest

    before = os.sched_getaffinity(0)
    cpus = sorted(before)[:2]
    best = quickest(len(cpus), cpus)
    assert sorted(cpu for cpu, _ in best) == cpus
    assert best == sorted(best, key=lambda item: item[1]) and all(us > 0 for _, us in best)
    assert os.sched_getaffinity(0) == before


def test_capture_checked_switches_each_variant_in_and_out_and_checks_both_results(monkeypatch, capsys):
    import numpy as np

    from bench._example18 import capture_checked
    from fhelium_cupy.runtime import cuda_graph

    class Value:
        def __init__(self, host):
            self.data = type("Device", (), {"get": lambda _self: host})()

    class Program:
        def __init__(self, fn):
            self.fn = fn

        def replay(self, ct, copy_output, synchronize):
            assert copy_output and synchronize
            return self.fn(ct)

    monkeypatch.setattr(cuda_graph.CudaGraphProgram, "capture", staticmethod(lambda fn, example_inputs: Program(fn)))
    log: list[str] = []
    state = {"variant": None}
    ref = np.arange(3, dtype=np.uint64)

    def use(name):
        log.append(f"use {name}")
        state["variant"] = name

    def restore():
        log.append("restore")
        state["variant"] = None

    def fn(ct):  # the wrong answer while variant "bad" is in
        return Value(ref + (state["variant"] == "bad"))

    programs = capture_checked(["a", "b"], use, restore, fn, object(), ref, prefix="n=8 ")
    assert list(programs) == ["a", "b"] and log == ["use a", "restore", "use b", "restore"]
    assert capsys.readouterr().out.splitlines()[0] == "n=8 a: eager and graph bit-identical to the code's eager call"
    log.clear()
    with pytest.raises(AssertionError, match="bad"):
        capture_checked(["bad"], use, restore, fn, object(), ref)
    assert log == ["use bad", "restore"]  # restored although the check failed


def test_variant_measure_times_eager_with_the_variant_in_and_rejects_unknown_keys():
    from bench._example18 import variant_measure

    log: list[str] = []
    measure = variant_measure({}, lambda name: log.append(f"use {name}"), lambda: log.append("restore"),
                              lambda ct: log.append("call"), object(), stream=None)
    assert measure("fused eager_ms") >= 0
    assert log[0] == "use fused" and log[-1] == "restore" and log.count("call") == 33  # 3 warmups + 30 samples
    with pytest.raises(ValueError, match="unknown measurement"):
        measure("fused device_ms")


def test_backend_switch_puts_each_variant_in_and_the_engines_own_back():
    from types import SimpleNamespace

    from bench._example18 import backend_switch

    own, other = object(), object()
    engine = SimpleNamespace(backend=own)
    use, restore = backend_switch(engine, {"own": own, "other": other})
    use("other")
    assert engine.backend is other
    restore()
    assert engine.backend is own


def test_compare_backends_checks_each_backend_then_alternates_the_measurements(monkeypatch, capsys):
    """The backend probes' one call: every variant put in and checked (its eager result and
    replay against the reference), the engine's own backend back afterwards, then the
    measurement keys alternated over the rounds."""
    import sys
    from types import ModuleType, SimpleNamespace

    import numpy as np

    import bench._example18 as example18
    from fhelium_cupy.runtime import cuda_graph

    ref = np.arange(3, dtype=np.uint64)
    own, other = object(), object()
    engine = SimpleNamespace(backend=own)
    seen: list[object] = []

    def fn(ct):
        seen.append(engine.backend)
        return SimpleNamespace(data=SimpleNamespace(get=lambda: ref))

    class Program:
        def replay(self, ct, copy_output, synchronize):
            return fn(ct)

    monkeypatch.setattr(cuda_graph.CudaGraphProgram, "capture", staticmethod(lambda f, example_inputs: Program()))
    fake_cupy = ModuleType("cupy")
    fake_cupy.cuda = SimpleNamespace(Stream=lambda non_blocking: "stream")
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    measured: list[tuple[str, str]] = []

    def fake_measure(programs, use, restore, f, ct, stream):
        assert list(programs) == ["own", "other"] and stream == "stream"
        return lambda key: measured.append((key, stream)) or 1.0

    monkeypatch.setattr(example18, "variant_measure", fake_measure)
    values = example18.compare_backends(engine, {"own": own, "other": other}, fn, object(), ref,
                                        ["own device_us", "other device_us"], rounds=2)
    # each variant's eager check with it in; the replay check after the engine's own is back
    assert seen == [own, own, other, own] and engine.backend is own
    assert [key for key, _ in measured] == ["own device_us", "other device_us", "other device_us", "own device_us"]
    assert values == {"own device_us": [1.0, 1.0], "other device_us": [1.0, 1.0]}
    assert "other: eager and graph bit-identical" in capsys.readouterr().out


def test_capture_private_captures_on_the_stream_with_a_pool_of_its_own():
    """``bench.kernels_gpu.capture_private``: ``fn`` runs between ``begin_capture`` and
    ``end_capture`` of the given stream, current and with a new pool's allocator, and the
    pool comes back with the graph."""
    import contextlib
    from types import SimpleNamespace

    from bench.kernels_gpu import capture_private

    events: list = []

    class Stream:
        def __enter__(self):
            events.append("enter")

        def __exit__(self, *exc):
            events.append("exit")

        def begin_capture(self):
            events.append("begin")

        def end_capture(self):
            events.append("end")
            return "graph"

    class Pool:
        def malloc(self, nbytes):
            return nbytes

    @contextlib.contextmanager
    def using_allocator(malloc):
        events.append(("allocator", type(malloc.__self__).__name__))
        yield
        events.append("allocator off")

    cp = SimpleNamespace(cuda=SimpleNamespace(MemoryPool=Pool, using_allocator=using_allocator))
    graph, pool = capture_private(cp, lambda: events.append("fn"), Stream())
    assert graph == "graph" and isinstance(pool, Pool)
    assert events == ["enter", ("allocator", "Pool"), "begin", "fn", "end", "allocator off", "exit"]


def test_time_host_runs_before_untimed_after_the_drain_and_times_the_call_alone(monkeypatch):
    clock = _FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    calls: list[str] = []

    def before() -> None:
        calls.append("before")
        clock.now += 1.0  # untimed

    def fn() -> None:
        calls.append("fn")
        clock.now += 2e-3

    result = timing.time_host(fn, runs=2, warmup=1, synchronize=lambda: calls.append("sync"), sync_inside=False,
                              before=before)
    assert calls == ["before", "fn", "sync"] + ["sync", "before", "fn", "sync"] * 2
    assert round(result["median_ms"], 9) == 2.0


# Floors by hand (8-byte words, a limb = N words): slots32768-scale40-depth34 has N = 2^16,
# L = 35 Q primes, K = 4 P primes, 7 digits: a limb 524,288 B, a ciphertext 2 L limbs =
# 36,700,160 B, a key 2 d (L + K) limbs = 286,261,248 B. slots8192-scale40-depth7: N = 2^14,
# L = 8, K = 1, 8 digits: a limb 131,072 B, a ciphertext 2,097,152 B, a key 18,874,368 B.
FLOORS = [
    ("slots32768-scale40-depth34", "ntt_ct", None, 2 * 36_700_160),
    ("slots32768-scale40-depth34", "rotate", None, 2 * 36_700_160 + 286_261_248),
    ("slots32768-scale40-depth34", "multiply_relinearize", None, 3 * 36_700_160 + 286_261_248),
    ("slots32768-scale40-depth34", "rescale", None, 36_700_160 + 2 * 34 * 524_288),
    ("slots32768-scale40-depth34", "matvec", 8, 36_700_160 + 7 * 286_261_248 + 8 * 35 * 524_288 + 2 * 34 * 524_288),
    ("slots8192-scale40-depth7", "rotate", None, 2 * 2_097_152 + 18_874_368),
]


@pytest.mark.parametrize(("preset", "op", "size", "expected"), FLOORS)
def test_floor_bytes_are_the_traffic_model_by_hand(preset, op, size, expected):
    from bench.ops import floor_bytes, parameter_summary

    assert floor_bytes(parameter_summary(preset), op, size=size) == expected


def test_floor_bytes_of_fewer_limbs_count_only_the_digits_still_active():
    from bench.ops import floor_bytes, parameter_summary

    summary = parameter_summary("slots32768-scale40-depth34")  # digits of 5 primes; the first prime drops first
    limb = 1 << 19
    # 10 active limbs = ids 25..34: the last two digits (ids 25..29, 30..34)
    assert floor_bytes(summary, "rotate", limbs=10) == 2 * (2 * 10 * limb) + 2 * 2 * (10 + 4) * limb


def test_merge_plan_keeps_every_size_of_a_repeated_preset_once():
    from bench.run_all import merge_plan

    plan = [("a", (4, 8)), ("b", (2,)), ("a", (8, 16))]
    assert merge_plan(plan) == [("a", (4, 8, 16)), ("b", (2,))]


RUN_ALL_BAD = [
    pytest.param(["--preset", "nope"], "unknown CKKS preset", id="unknown-preset"),
    pytest.param(["--sizes", "a"], "positive integer", id="bad-sizes"),
    pytest.param(["--preset", "test-n4096-scale40:0", "--insecure"], "positive integers", id="size-zero"),
    pytest.param(["--preset", "test-n4096-scale40:4"], "insecure", id="test-preset-without-insecure"),
    pytest.param(["--runs", "0"], "positive integer", id="runs-zero"),
    pytest.param(["--warmup", "-1"], ">= 0", id="warmup-negative"),
    pytest.param(["--budget-s", "nan"], "positive number of seconds", id="budget-nan"),
    pytest.param(["--from-json", "/no/such/results.json"], "FileNotFoundError", id="missing-json"),
]


@pytest.mark.parametrize(("argv", "expected"), RUN_ALL_BAD)
def test_run_all_refuses_bad_arguments_in_one_line_before_measuring(argv, expected, tmp_path, capsys):
    from bench.run_all import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "out"), "--device", "cpu", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err.strip().splitlines()[-1] and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing measured, nothing written


def test_run_all_fails_when_nothing_was_measured_and_merges_repeated_presets(tmp_path, capsys):
    from bench.run_all import main

    quick = ["--device", "cpu", "--insecure", "--runs", "1", "--warmup", "0", "--no-bsgs", "--no-ops", "--no-torch"]
    assert main(["--out", str(tmp_path / "none"), *quick, "--preset", "test-n4096-scale40:3"]) == 1
    captured = capsys.readouterr()
    assert "must divide" in captured.out and "nothing was measured" in captured.err
    assert main(["--out", str(tmp_path / "two"), *quick, "--preset", "test-n4096-scale40:2",
                 "--preset", "test-n4096-scale40:4"]) == (0 if importlib.util.find_spec("matplotlib") else 1)

    results = json.loads((tmp_path / "two" / "results.json").read_text())
    assert [row["size"] for row in results["presets"]["test-n4096-scale40"]["matvec"]] == [2, 4]
    assert results["config"]["plan"] == [{"preset": "test-n4096-scale40", "sizes": [2, 4]}]
