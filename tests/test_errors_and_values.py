"""The exception hierarchy and the value-type registry."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from fhelium_cupy import errors
from fhelium_cupy.values import (
    MAPPING_TAG,
    freeze_metadata,
    register_value_type,
    registered_value_types,
    value_envelope,
)
from tests.helpers.toy_values import ToyValue


def test_exception_hierarchy_matches_the_spec():
    assert issubclass(errors.ExecutionError, errors.FHEliumError)
    assert issubclass(errors.ExecutionError, RuntimeError)
    assert issubclass(errors.ExecutionInputError, errors.ExecutionError)
    assert issubclass(errors.CudaGraphInputError, errors.ExecutionInputError)
    assert issubclass(errors.CudaGraphCaptureError, errors.ExecutionError)
    assert not issubclass(errors.CudaGraphCaptureError, errors.ExecutionInputError)
    assert issubclass(errors.ConfigurationError, ValueError)
    assert issubclass(errors.InsecureParametersError, errors.ConfigurationError)


def test_capture_error_carries_stage_name_and_detail_and_pickles():
    err = errors.CudaGraphCaptureError(stage="first replay", function_name="f", detail="boom")
    assert (err.stage, err.function_name, err.detail) == ("first replay", "f", "boom")
    assert str(err) == "CUDA Graph first replay failed for f: boom"
    again = pickle.loads(pickle.dumps(err))
    assert (again.stage, again.function_name, again.detail) == ("first replay", "f", "boom")


def test_registry_by_exact_class_and_name_conflicts():
    assert "ToyValue" in registered_value_types()

    class Sub(ToyValue):
        pass

    from fhelium_cupy.values import is_registered_value

    assert not is_registered_value(Sub(np.zeros(1)))
    with pytest.raises(ValueError, match="already registered"):
        register_value_type(Sub, type_name="ToyValue")
    with pytest.raises(TypeError, match="has no value_metadata"):
        register_value_type(int)
    register_value_type(ToyValue, type_name="ToyValue", schema_version=1)  # idempotent
    with pytest.raises(ValueError, match="already registered as 'ToyValue'"):
        register_value_type(ToyValue, type_name="ToyValue2")  # one class, one name
    assert "ToyValue2" not in registered_value_types()


def test_envelope_sorts_tensors_and_freezes_metadata():
    v = ToyValue(np.zeros(2), aux=np.ones(1))
    env = value_envelope(v)
    assert [name for name, _ in env.tensors] == ["aux", "data"]
    assert env.tensors[1][1] is v.data
    assert freeze_metadata({"b": [1, {"c": 2}], "a": None}) == (("a", None), ("b", (1, (MAPPING_TAG, ("c", 2)))))
    with pytest.raises(TypeError, match=r"metadata\.x"):
        freeze_metadata({"x": np.zeros(1)})
