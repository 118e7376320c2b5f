"""Run one worker on several threads released together, switching as often as possible."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["run_together"]


def run_together(worker: Callable[[int], Any], threads: int) -> list[Any]:
    """``worker(i)`` for ``i`` in ``range(threads)``, each on its own thread, all started at
    one barrier with a 1 us switch interval (races inside a few bytecodes show up); returns
    the results in thread order and re-raises the first worker error on the caller."""
    start = threading.Barrier(threads)
    results: list[Any] = [None] * threads
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = worker(i)
        except BaseException as exc:  # reported below
            errors.append(exc)

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    return results
