"""Markers, capability probes and shared fixtures: GPU tests skip with the exact missing piece."""

from __future__ import annotations

import pytest

from fhelium_cupy.interop import capabilities


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = capabilities.cuda_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cp():
    """CuPy for a GPU test; afterwards the device is drained and no stream is left capturing."""
    import cupy

    yield cupy
    cupy.cuda.runtime.deviceSynchronize()
    assert not cupy.cuda.get_current_stream().is_capturing()

