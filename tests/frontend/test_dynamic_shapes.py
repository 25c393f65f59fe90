"""Ops with data-dependent output shapes are named, with their source line, in UnsupportedOpError."""

import pytest
import torch
from torch import nn

import pybuda
from pybuda.errors import UnsupportedOpError


class _Nonzero(nn.Module):
    def forward(self, x):
        return torch.nonzero(x)


class _BoolMask(nn.Module):
    def forward(self, x):
        return x[x > 0]


class _Unique(nn.Module):
    def forward(self, x):
        return torch.unique(x)


@pytest.mark.parametrize("model, op", [(_Nonzero, "aten.nonzero"), (_BoolMask, "aten.index.Tensor"),
                                       (_Unique, "aten._unique2")])
def test_data_dependent_shape_names_op_and_location(model, op):
    module = pybuda.PyTorchModule("m", model().eval())
    with pytest.raises(UnsupportedOpError) as info:
        pybuda.run_inference(module, inputs=[(torch.randn(1, 32, 32),)]).get()
    text = str(info.value)
    assert op in text and "data-dependent" in text
    assert "test_dynamic_shapes.py:" in text
    assert [o.framework_op for o in info.value.ops if o.framework_op.startswith(op)]
