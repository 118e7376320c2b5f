"""A pool program's retained output on the CPU (``fake_capture``): value templates built over
the right retained arrays when plain arrays sit between values (audit, session 32)."""

from __future__ import annotations

import gc
from dataclasses import dataclass, replace
from typing import Any

import pytest

from fhelium_cupy.runtime import CudaGraphPool, CudaGraphProgram
from fhelium_cupy.values import register_value_type
from tests.helpers.fake_capture import device_array, install


@dataclass(eq=False)
class _Sized:
    """A value whose with_value_tensors checks the shape, as ckks.Ciphertext does."""

    data: Any
    level: int = 0

    def value_metadata(self) -> dict:
        return {"level": self.level}

    def value_tensors(self) -> dict:
        return {"data": self.data}

    def with_value_tensors(self, tensors: dict) -> _Sized:
        if tuple(tensors["data"].shape) != tuple(self.data.shape):
            raise ValueError(f"needs data of shape {tuple(self.data.shape)}, got {tuple(tensors['data'].shape)}")
        return replace(self, data=tensors["data"])


register_value_type(_Sized, type_name="tests.pool_outputs.Sized")


@pytest.fixture
def fake(monkeypatch):
    gc.collect()
    return install(monkeypatch.setattr)


def test_a_pool_program_s_values_wrap_their_own_retained_arrays(fake):
    """The templates took the retained arrays in order of values only: a plain array before a
    value gave the value that array (a shape error at capture, or the wrong storage)."""
    x = device_array((8,))

    def f(a):
        return (device_array((3,)), {"v": _Sized(device_array((8,)))}, device_array((5,)), _Sized(device_array((2,))))

    with CudaGraphPool("cuda:0") as pool:
        program = CudaGraphProgram.capture(f, example_inputs=(x,), warmup=1, pool=pool)
        plain, mapping, tail, last = program.output
        leaves = program._output.leaves
        assert [tuple(leaf.shape) for leaf in leaves] == [(3,), (8,), (5,), (2,)]
        assert mapping["v"].data is leaves[1] and last.data is leaves[3]
        assert plain is leaves[0] and tail is leaves[2]
