"""The figures of ``bench/plots.py`` keep their text inside the canvas: the environment footer
breaks between fields, and bars are named by a short ring-degree tag (no GPU needed)."""

from __future__ import annotations

import pytest

from bench.plots import _preset_tags, footer_text, write_plots

ENV = {"gpu": "NVIDIA H200", "driver": "580.159.04\n580.159.04", "cupy": "14.2.0", "torch": "2.11.0+cu130",
       "numpy": "2.5.2", "date": "2026-11-30T00:50:07+00:00"}


def test_footer_breaks_between_fields_and_keeps_every_field() -> None:
    text = footer_text(ENV, "cuda")
    lines = text.split("\n")
    assert len(lines) == 2 and all(len(line) <= 100 for line in lines), lines
    for field in ("device cuda: NVIDIA H200", "driver 580.159.04 580.159.04", "CuPy 14.2.0", "torch 2.11.0+cu130",
                  "NumPy 2.5.2", "2026-11-30T00:50:07+00:00"):
        assert field in text
    assert footer_text(ENV, width=1000).count("\n") == 0


def test_presets_are_tagged_by_ring_degree_unless_two_share_it() -> None:
    results = {"presets": {
        "slots8192-scale40-depth7": {"parameters": {"ring_degree": 1 << 14}},
        "slots32768-scale40-depth34": {"parameters": {"ring_degree": 1 << 16}},
        "slots32768-scale40-depth33-dnum4": {"parameters": {"ring_degree": 1 << 16}},
        "custom": {},
    }}
    assert _preset_tags(results) == {
        "slots8192-scale40-depth7": "N=2^14",
        "slots32768-scale40-depth34": "slots32768-scale40-depth34",
        "slots32768-scale40-depth33-dnum4": "slots32768-scale40-depth33-dnum4",
        "custom": "custom",
    }


def test_matvec_and_host_figures_are_written_from_minimal_results(tmp_path) -> None:
    pytest.importorskip("matplotlib", reason="the plots need the bench extra (pip install 'fhelium-cupy[bench]')")
    results = {"environment": ENV, "presets": {"slots8192-scale40-depth7": {
        "parameters": {"ring_degree": 1 << 14},
        "matvec": [{"size": s, "eager": {"latency": {"median_ms": 2.0 * s}, "host_issue": {"median_ms": 1.0}},
                    "graph": {"latency": {"median_ms": 0.07 * s}, "host_replay": {"median_ms": 0.01},
                              "host_replay_prepared": {"median_ms": 0.003}}} for s in (8, 16)],
    }}}
    paths = write_plots(results, tmp_path)
    assert any(p.endswith("matvec_latency.png") for p in paths) and any(p.endswith("replay_host_overhead.png") for p in paths)
