"""A CupyBackend's kernel launches recorded in order (the launches still run)."""

from __future__ import annotations

from typing import Any


def record_launches(backend: Any, *, details: bool = False) -> list[Any]:
    """Every launch ``backend`` makes from now on: its kernel name, or with ``details`` the
    tuple ``(name, grid, block, shared_mem)``. Replaces the instance's ``_launch`` (a fresh
    backend per test, or one that keeps recording)."""
    log: list[Any] = []
    launch = backend._launch

    def recorded(name: str, grid: Any, block: Any, args: Any, shared_mem: int = 0) -> None:
        log.append((name, grid, block, shared_mem) if details else name)
        launch(name, grid, block, args, shared_mem=shared_mem)

    backend._launch = recorded
    return log
