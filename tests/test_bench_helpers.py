"""The side-by-side helpers the GPU probes under bench/results/ share (bench/_example18.py; no GPU)."""

from __future__ import annotations

from bench._example18 import alternate, without_fork_root


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


def test_without_fork_root_passes_every_launch_but_the_root():
    launched: list[tuple] = []
    launch = without_fork_root(lambda name, *args, **kwargs: launched.append((name, args, kwargs)))
    launch("graph_fork_root", (1, 1, 1), 1, ())
    launch("rns_add", (4, 2, 1), 256, ("x",), shared_mem=0)
    assert launched == [("rns_add", ((4, 2, 1), 256, ("x",)), {"shared_mem": 0})]
