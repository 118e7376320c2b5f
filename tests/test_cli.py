"""The ``fhelium-cupy`` command line on CPU: info, demo, bench and one-line errors."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import pytest

from fhelium_cupy import _bench
from fhelium_cupy._cli import build_parser, main
from fhelium_cupy.interop.capabilities import cuda_unavailable_reason
from tests.helpers.scripts import run_python

_NEEDS_SUITE = pytest.mark.skipif(
    _bench.suite_root() is None, reason="the bench suite (bench/run_all.py) is in a source checkout only"
)


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "fhelium_cupy", *args, timeout=timeout)


def test_info_runs_as_a_module_and_names_the_package_and_cuda_state() -> None:
    result = _run("info")
    assert result.returncode == 0, result.stderr
    assert "fhelium_cupy" in result.stdout
    assert re.search(r"^cuda\s+(available|unavailable)", result.stdout, re.M)
    sources = re.search(r"^kernel sources\s+(\S+)", result.stdout, re.M)
    assert sources and Path(sources.group(1), "ntt.cu").is_file()  # where the loader found them
    nvrtc = re.search(r"^nvrtc\s+(\S+)", result.stdout, re.M)
    missing = re.search(r"^missing optional pieces\s+(.*)$", result.stdout, re.M)
    if nvrtc and nvrtc.group(1) == "missing":  # a missing NVRTC is named with the extra that brings it
        assert "nvrtc" in missing.group(1) and "nvidia-cuda-nvrtc" in result.stdout


def test_demo_on_cpu_uses_the_128_bit_preset_and_decrypts_within_1e_4(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--device", "cpu", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "slots8192-scale40-depth7" in out and "INSECURE" not in out  # no implicit insecure opt-in
    errors = [float(v) for v in re.findall(r"max abs error ([0-9.eE+-]+)", out)]
    assert errors, out
    assert max(errors) < 1e-4, out
    assert "needs a CUDA GPU" in out  # says plainly that graph capture was skipped


def test_demo_with_an_explicit_test_preset_and_insecure_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--device", "cpu", "--preset", "test-n4096-scale40", "--insecure", "--size", "4",
                 "--no-progress"]) == 0
    errors = [float(v) for v in re.findall(r"max abs error ([0-9.eE+-]+)", capsys.readouterr().out)]
    assert errors and max(errors) < 1e-4


BAD_ARGUMENTS = [
    pytest.param(["demo", "--device", "cpu", "--preset", "no-such-preset"], "unknown preset", id="unknown-preset"),
    pytest.param(["demo", "--device", "cpu", "--size", "0"], "positive integer", id="size-zero"),
    pytest.param(["demo", "--device", "cpu", "--size", "-3"], "positive integer", id="size-negative"),
    pytest.param(["demo", "--device", "cpu", "--size", "3"], "must divide", id="size-not-dividing-slots"),
    pytest.param(["demo", "--device", "cpu", "--preset", "test-n4096-scale40"], "insecure", id="test-preset-without-insecure"),
    pytest.param(["demo", "--frobnicate"], "unrecognized arguments", id="unknown-option"),
    pytest.param(["bench", "--sizes", "4,x"], "positive integer", id="bench-bad-sizes"),
    pytest.param(["bench", "--sizes", "8,,16"], "expected sizes", id="bench-empty-size"),
    pytest.param(["bench", "--preset", "test-n4096-scale40:"], "expected sizes", id="bench-preset-empty-sizes"),
    pytest.param(["bench", "--preset", "test-n4096-scale40:x"], "positive integer", id="bench-preset-bad-sizes"),
    pytest.param(["bench", "--preset", "nope"], "unknown preset", id="bench-unknown-preset"),
    pytest.param(["bench", "--device", "cpu", "--preset", "test-n4096-scale40"], "insecure", id="bench-test-preset-without-insecure"),
    pytest.param(["nonsense"], "invalid choice", id="unknown-command"),
]


@pytest.mark.parametrize(("argv", "expected"), BAD_ARGUMENTS)
def test_bad_arguments_give_one_line_on_stderr_and_exit_2(argv: list[str], expected: str) -> None:
    """Usage errors, checked before anything is built: exit status 2 (argparse's), nothing on stdout."""
    result = _run(*argv)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]


@pytest.mark.skipif(cuda_unavailable_reason() is None, reason="a GPU is present: --device cuda is valid here")
def test_device_cuda_without_a_gpu_is_a_one_line_error() -> None:
    result = _run("demo", "--device", "cuda")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "needs a CUDA GPU" in result.stderr


@_NEEDS_SUITE
def test_bench_on_cpu_writes_json_with_the_environment_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="the plots need the bench extra (pip install 'fhelium-cupy[bench]')")
    target = tmp_path / "bench.json"
    plots = tmp_path / "plots"
    assert main(["bench", "--device", "cpu", "--sizes", "4", "--runs", "2", "--warmup", "1", "--json", str(target),
                 "--plots", str(plots), "--no-progress"]) == 0
    results = json.loads(target.read_text())
    env = results["environment"]
    for key in ("date", "python", "numpy", "cupy", "torch"):
        assert key in env
    assert not results["config"]["insecure"]  # the CPU default is the 128-bit preset, never implied insecure
    preset = results["presets"]["slots8192-scale40-depth7"]
    assert preset["matvec"][0]["size"] == 4
    assert preset["matvec"][0]["max_abs_error"] < 1e-4
    assert preset["matvec"][0]["eager"]["latency"]["median_ms"] > 0
    assert "skipped" in preset["matvec"][0]["graph"]
    ops = {row["op"]: row for row in preset["ops"]}
    assert ops["rotate"]["floor_bytes"] > 0 and "latency" in ops["rotate"]
    assert any(p.endswith(".png") for p in results["plots"])
    assert "matvec" in capsys.readouterr().out


def test_bench_without_a_checkout_says_where_the_suite_lives(tmp_path, monkeypatch, capsys) -> None:
    """An installed wheel has no bench/: run from elsewhere, the command names the way out."""
    monkeypatch.setattr(_bench, "__file__", str(tmp_path / "site" / "fhelium_cupy" / "_bench.py"))
    monkeypatch.chdir(tmp_path)
    assert _bench.suite_root() is None
    assert main(["bench", "--device", "cpu", "--sizes", "4"]) == 1
    err = capsys.readouterr().err
    assert "bench/run_all.py" in err and "pip install -e ." in err and "root directory" in err


def test_bench_finds_the_suite_of_the_checkout_it_runs_in(tmp_path, monkeypatch) -> None:
    checkout = Path(__file__).resolve().parents[1]
    if not (checkout / "bench" / "run_all.py").is_file():
        pytest.skip("the tests run outside a source checkout")
    monkeypatch.setattr(_bench, "__file__", str(tmp_path / "site" / "fhelium_cupy" / "_bench.py"))
    monkeypatch.chdir(checkout)
    assert _bench.suite_root() == checkout


@_NEEDS_SUITE
def test_bench_says_what_it_could_not_do_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quick = ["bench", "--device", "cpu", "--no-ops", "--runs", "1", "--warmup", "0", "--no-progress"]
    assert main([*quick, "--sizes", "3"]) == 1  # 3 does not divide the slot count: nothing measured
    captured = capsys.readouterr()
    assert "size 3" in captured.out and "must divide" in captured.out
    assert "nothing was measured" in captured.err
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert main([*quick, "--sizes", "4", "--plots", str(blocked / "plots")]) == 1
    captured = capsys.readouterr()
    assert "plots not written" in captured.err and "wrote" not in captured.out
    assert main([*quick, "--sizes", "4", "--json", str(blocked / "results.json")]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1  # one line, no traceback


def test_every_option_with_a_default_states_it_in_its_help():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            if action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
                continue
            assert action.help and "default" in action.help, f"{name} {action.option_strings[0]}: {action.help!r}"


def test_progress_follows_the_library_rule_unless_switched_off():
    """``--no-progress`` turns the bars off; without it the library decides (a bar only when
    stderr is a terminal), where the command used to force one into redirected logs."""
    from fhelium_cupy._cli import _progress_choice, build_parser

    parser = build_parser()
    assert _progress_choice(parser.parse_args(["demo"])) is None
    assert _progress_choice(parser.parse_args(["demo", "--no-progress"])) is False
    assert _progress_choice(parser.parse_args(["bench"])) is None
    assert _progress_choice(parser.parse_args(["bench", "--no-progress"])) is False


def test_info_names_the_extra_of_each_missing_piece_and_no_test_only_package(monkeypatch):
    from fhelium_cupy import _cli

    monkeypatch.setattr(_cli, "_optional_version", lambda name: None if name in ("safetensors", "rich") else "1.0")
    rows = dict(_cli._info_rows())
    assert rows["missing optional pieces"] == "safetensors ([io]), rich ([bench])"
    assert "hypothesis" not in rows  # only the test extra needs it
