"""What a new user runs first works on a GPU as the docs say: examples/, the README's capture
snippet and ``fhelium-cupy demo``, each in a fresh process (CPU paths: test_cli_examples.py,
test_cli.py).

Every decrypted result must match the cleartext product: the scripts print
``max abs error E`` per result, and each E must be below 1e-4 (the N=2^14 presets decrypt
to about 1e-8).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers.scripts import EXAMPLES, readme_capture_snippet, run_python

pytestmark = pytest.mark.gpu

_ERROR = re.compile(r"max abs error ([0-9.eE+-]+)")


def _errors(stdout: str) -> list[float]:
    return [float(v) for v in _ERROR.findall(stdout)]


def _check(result: subprocess.CompletedProcess[str], results: int) -> list[float]:
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    errors = _errors(result.stdout)
    assert len(errors) == results, result.stdout
    assert max(errors) < 1e-4, result.stdout
    return errors


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_each_example_runs_its_cuda_path(example: Path) -> None:
    result = run_python(str(example), timeout=300)
    assert "needs a CUDA GPU" not in result.stdout and "no GPU" not in result.stdout, result.stdout
    # 01: the eager result; 02: three borrowed replays, then their owned copies; 03: four
    # requests; 04: one per program of the pool; 05: three replays of the encrypted layer;
    # 06: the client's decryption of the server's result; 07: the owner's unflooded view
    _check(result, {"01": 1, "02": 6, "03": 4, "04": 4, "05": 3, "06": 1, "07": 1}[example.name[:2]])


def test_readme_capture_snippet_runs_as_written_and_decrypts_each_replay() -> None:
    code = readme_capture_snippet()
    assert 'device="cuda"' in code and "program.replay(" in code  # the block this test means
    result = run_python("-c", code, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    values = [float(line) for line in result.stdout.split()]
    assert len(values) == 3 and max(values) < 1e-4, result.stdout


def test_demo_captures_and_replays_on_the_gpu() -> None:
    result = run_python("-m", "fhelium_cupy", "demo", "--no-progress", "--replays", "3", timeout=300)
    assert "needs a CUDA GPU" not in result.stdout, result.stdout
    _check(result, 4)  # the eager call and three replays
    assert re.search(r"replay\s+input 3", result.stdout), result.stdout
