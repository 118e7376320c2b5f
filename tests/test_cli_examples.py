"""examples/ and the bench entry point run on a CPU-only machine (GPU examples exit 0 with a reason)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fhelium_cupy.interop.capabilities import cuda_unavailable_reason
from tests.helpers.scripts import EXAMPLES, readme_capture_snippet
from tests.helpers.scripts import run_python as _python


@pytest.mark.skipif(cuda_unavailable_reason() is None,
                    reason="a GPU is present: the examples take their CUDA path (tests/test_docs_gpu.py)")
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_each_example_exits_zero_without_a_gpu(example: Path) -> None:
    result = _python(str(example))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    errors = [float(v) for v in re.findall(r"max abs error ([0-9.eE+-]+)", result.stdout)]
    expected = {"01": 1, "05": 3, "06": 1, "07": 1}.get(example.name[:2], 0)  # the examples with an eager CPU path
    assert len(errors) == expected, result.stdout
    assert all(e < 1e-3 for e in errors), result.stdout


def test_run_all_cpu_smoke_writes_json_markdown_and_redraws_from_json(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plots need the bench extra (pip install 'fhelium-cupy[bench]')")
    out = tmp_path / "out"
    result = _python("bench/run_all.py", "--device", "cpu", "--preset", "test-n4096-scale40:2", "--insecure",
                     "--runs", "1", "--warmup", "0", "--no-bsgs", "--out", str(out))
    assert result.returncode == 0, result.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["schema"] == "fhelium-cupy-bench/1"
    assert results["presets"]["test-n4096-scale40"]["matvec"][0]["max_abs_error"] < 1e-4
    assert "## Matrix-vector product" in (out / "results.md").read_text()
    again = _python("bench/run_all.py", "--from-json", str(out / "results.json"), "--out", str(tmp_path / "redrawn"))
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "redrawn" / "results.md").is_file()


def test_readme_capture_snippet_is_python_that_uses_the_documented_names() -> None:
    """The README's capture block compiles and names what the package exports (it runs on a
    GPU in tests/test_docs_gpu.py)."""
    from fhelium_cupy.ckks import linalg

    code = readme_capture_snippet()
    compile(code, "README.md", "exec")
    for name in re.findall(r"linalg\.(\w+)", code):
        assert hasattr(linalg, name), name
