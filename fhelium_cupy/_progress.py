"""Progress bars on stderr for long host work (key generation, the CLI's demo and bench).

rich when installed, else tqdm, else nothing: both are optional (the ``bench`` extra).
Stdout stays clean for the numbers callers print. Imports nothing from the package, so
every layer may use it.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["progress_bar", "show_progress_by_default"]


def _no_progress(n: int = 1) -> None:
    return None


def show_progress_by_default(total: int) -> bool:
    """The ``progress=None`` rule: a bar when stderr is a terminal and more than one step is left."""
    isatty = getattr(sys.stderr, "isatty", None)
    return total > 1 and callable(isatty) and bool(isatty())


@contextlib.contextmanager
def progress_bar(total: int, description: str, *, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr; yields ``advance(n)`` (a no-op when disabled or unavailable)."""
    if not enabled or total <= 0:
        yield _no_progress
        return
    try:
        rich_progress: Any = importlib.import_module("rich.progress")
        Console: Any = importlib.import_module("rich.console").Console
    except ImportError:
        rich_progress = None
    if rich_progress is not None:
        console = Console(file=sys.stderr)
        with rich_progress.Progress(
            rich_progress.TextColumn("{task.description}"), rich_progress.BarColumn(),
            rich_progress.MofNCompleteColumn(), rich_progress.TimeElapsedColumn(),
            console=console, transient=not console.is_terminal,
        ) as progress:
            task = progress.add_task(description, total=total)

            def advance_rich(n: int = 1) -> None:
                progress.advance(task, n)

            yield advance_rich
        return
    try:
        from tqdm import tqdm
    except ImportError:
        yield _no_progress
        return
    with tqdm(total=total, desc=description, file=sys.stderr, leave=False) as bar:

        def advance_tqdm(n: int = 1) -> None:
            bar.update(n)

        yield advance_tqdm
