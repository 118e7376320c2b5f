"""Teardown that always finishes: release steps run even when one fails (a CUDA error such as
a sticky one from an earlier faulting kernel), and the first failure is raised at the end."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["TeardownErrors"]


class TeardownErrors:
    """Runs release steps that must all run; keeps the first exception for :meth:`raise_first`."""

    __slots__ = ("first",)

    def __init__(self) -> None:
        self.first: Exception | None = None

    def run(self, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception as error:  # kept, and raised once the teardown is done
            if self.first is None:
                self.first = error

    def raise_first(self) -> None:
        if self.first is not None:
            raise self.first
