"""Run the repository's scripts in a fresh Python process, the way a user does from a checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["EXAMPLES", "readme_capture_snippet", "run_python"]

_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((_ROOT / "examples").glob("0*.py"))


def run_python(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python *args`` in the repository root with the checkout first on ``PYTHONPATH``;
    captured text output, never raises on a non-zero exit."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=_ROOT)


def readme_capture_snippet() -> str:
    """The Python block under the README's "Capture an encrypted matrix-vector product" heading."""
    text = (_ROOT / "README.md").read_text()
    section = text.split("## Capture an encrypted matrix-vector product", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's capture section has no Python block"
    return match.group(1)
