"""``fhelium-cupy bench``: find the source checkout's ``bench/`` suite, run it, print a table.

The suite is not part of the installed package (it imports matplotlib, rich and, for the
comparison, torch); the command finds it next to the package (an editable install of a
checkout) or in the current directory (a checkout, whatever is installed).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import ConfigurationError

__all__ = ["run"]


def suite_root() -> Path | None:
    """The checkout whose ``bench/run_all.py`` the command runs: next to the package, else the
    current directory; None when neither has it."""
    for root in (Path(__file__).resolve().parents[1], Path.cwd()):
        if (root / "bench" / "run_all.py").is_file():
            return root
    return None


def _suite() -> ModuleType:
    root = suite_root()
    if root is None:
        raise ConfigurationError(
            "`fhelium-cupy bench` runs the benchmark suite of a source checkout (bench/run_all.py), which "
            f"an installed wheel does not carry (not next to {Path(__file__).parent}, not in {Path.cwd()}): "
            "run it from the repository's root directory, or install the checkout with `pip install -e .`"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("bench.run_all")


def run(*, presets: list[str | None], json_path: str | None, plots_dir: str | None, md_path: str | None,
        **options: Any) -> int:
    """Run ``bench.run_all.run`` with the CLI options; print the table, what was skipped and
    where files went. Exit status 1 when nothing was measured or the plots were asked for and
    not written (the reasons are printed with the table)."""
    suite = _suite()
    results = suite.run(presets=presets, json_path=json_path, plots_dir=plots_dir, md_path=md_path, **options)
    suite.print_table(results)
    measured, plots_error = suite.outcome(results)
    plots = results.get("plots")
    written = [p for p in (json_path, md_path) if p] + (list(plots) if isinstance(plots, list) else [])
    if written:
        print("wrote " + ", ".join(str(p) for p in written))
    if not measured:
        print("fhelium-cupy: error: nothing was measured (see skipped above)", file=sys.stderr)
    if plots_error is not None:
        print(f"fhelium-cupy: error: plots not written: {plots_error}", file=sys.stderr)
    return 0 if measured and plots_error is None else 1
