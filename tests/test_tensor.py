"""Tensor, Parameter, TensorShape, DataFormat and MathFidelity as the user sees them."""

import numpy as np
import pytest
import torch

import pybuda
from pybuda.errors import InputError
from pybuda.tensor import Parameter, Tensor, TensorShape, pytorch_dtype_to_buda_dataformat


from pybuda.dtypes import DataFormat, MathFidelity
def test_tensor_shape_accessors_count_from_the_end():
    s = TensorShape(2, 3, 40, 70)
    assert (s.w, s.z, s.r, s.c) == (2, 3, 40, 70)
    assert (s.rt, s.ct) == (2, 3)  # tiles, rounded up
    assert TensorShape(5).r == 1 and TensorShape(5).c == 5
    assert s == (2, 3, 40, 70) and len(s) == 4 and s[-1] == 70


def test_every_reference_data_format_exists():
    names = ["Float32", "Float16", "Bfp8", "Bfp4", "Bfp2", "Float16_b", "Bfp8_b", "Bfp4_b", "Bfp2_b", "Lf8",
             "UInt16", "Int8", "RawUInt8", "RawUInt16", "RawUInt32", "Int32", "Invalid"]
    for name in names:
        assert DataFormat.from_json(name).name == name
        assert DataFormat[name].to_json() == name
    assert DataFormat.Float16_b.value == 5  # as in the API reference signature
    with pytest.raises(InputError, match="unknown data format"):
        DataFormat.from_json("Float8")


def test_math_fidelity_members_and_phases():
    assert [MathFidelity[n].phases for n in ("LoFi", "HiFi2", "HiFi3", "HiFi4")] == [1, 2, 3, 4]
    assert MathFidelity.from_json("HiFi2_A") == MathFidelity.HiFi2


@pytest.mark.parametrize("dtype,df", [(torch.float32, DataFormat.Float32), (torch.float16, DataFormat.Float16),
                                      (torch.bfloat16, DataFormat.Float16_b), (torch.int8, DataFormat.Int8),
                                      (torch.int32, DataFormat.Int32)])
def test_torch_dtype_mapping(dtype, df):
    assert pytorch_dtype_to_buda_dataformat(dtype) == df
    assert Tensor.create_from_torch(torch.zeros(2, dtype=dtype)).data_format == df


def test_parameter_from_shape_and_from_tensor():
    p = Parameter(1, 1, 32, 32, requires_grad=False)
    assert p.shape == (1, 1, 32, 32) and not p.requires_grad and p.data_format == DataFormat.Float32
    with pytest.raises(InputError, match="no value"):
        p.value()
    p.set_value(np.ones((1, 1, 32, 32), dtype=np.float32))
    assert p.value().sum() == 1024
    q = Parameter(torch.zeros(4, 8, dtype=torch.bfloat16), name="w")
    assert q.get_name() == "w" and q.data_format == DataFormat.Float16_b


def test_parameter_rejects_bad_shapes_and_values():
    with pytest.raises(InputError):
        Parameter(0, 3)
    p = Parameter(2, 2)
    with pytest.raises(InputError, match="shape"):
        p.set_value(torch.zeros(3, 3))


def test_tensor_arithmetic_records_ops_with_values():
    a = Tensor.create_from_torch(torch.full((2, 2), 3.0))
    b = Tensor.create_from_torch(torch.full((2, 2), 2.0))
    out = (a + b) * a - 1
    assert torch.equal(out.value(), torch.full((2, 2), 14.0))
    assert out.src_op.op_type == "subtract"


def test_top_level_names_resolve():
    for name in ("Tensor", "Parameter", "PyBudaModule", "PyTorchModule", "DataFormat", "MathFidelity",
                 "CompilerConfig", "CompileDepth", "set_configuration_options", "VerifyConfig", "BackendDevice",
                 "BackendType"):
        assert getattr(pybuda, name) is not None
    with pytest.raises(AttributeError):
        pybuda.does_not_exist
