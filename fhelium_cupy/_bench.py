"""``fhelium-cupy bench``: find the source checkout's ``bench/`` suite, run it, print a table.

The suite is not part of the installed package (it imports matplotlib, rich and, for the
comparison, torch); the command works from a source checkout or an editable install.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import ConfigurationError

__all__ = ["run"]


def _suite() -> ModuleType:
    root = Path(__file__).resolve().parents[1]
    if not (root / "bench" / "run_all.py").is_file():
        raise ConfigurationError(
            f"the benchmark suite (bench/run_all.py) was not found next to {Path(__file__).parent}; "
            "run `fhelium-cupy bench` from a source checkout (pip install -e .)"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("bench.run_all")


def run(*, presets: list[str | None], json_path: str | None, plots_dir: str | None, md_path: str | None,
        **options: Any) -> int:
    """Run ``bench.run_all.run`` with the CLI options; print the table and where files went."""
    suite = _suite()
    results = suite.run(presets=presets, json_path=json_path, plots_dir=plots_dir, md_path=md_path, **options)
    suite.print_table(results)
    written = [p for p in (json_path, md_path) if p] + list(results.get("plots") or [])
    if written:
        print("wrote " + ", ".join(str(p) for p in written))
    return 0
