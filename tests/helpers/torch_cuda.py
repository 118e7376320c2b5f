"""torch for GPU tests that exercise the torch bridges (torch is optional)."""

from __future__ import annotations

import pytest


def torch_with_cuda():
    """torch with a CUDA device, or skip the calling test."""
    torch = pytest.importorskip("torch", reason="torch is optional")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA on this machine")
    return torch
