"""The golden executor hands integer outputs back exact, and refuses a device value that is not an integer
(the compiler claimed integer data it did not keep exact) instead of rounding it into a plausible number."""

import pytest
import torch

from pybuda.errors import RuntimeFailure
from pybuda.golden.executor import integer_output


def test_integral_values_come_back_in_their_dtype():
    value = torch.tensor([[0.0, 3.0, -16777216.0, 4999.0]])
    out = integer_output("idx", value, torch.int64)
    assert out.dtype == torch.int64 and out.tolist() == [[0, 3, -16777216, 4999]]
    assert integer_output("mask", torch.tensor([0.0, 1.0]), torch.bool).tolist() == [False, True]


def test_a_non_integer_device_value_is_an_error_not_a_rounded_number():
    with pytest.raises(RuntimeFailure, match="non-integer value 2.5 at index \\[0, 1\\]"):
        integer_output("idx", torch.tensor([[1.0, 2.5]]), torch.int64)
