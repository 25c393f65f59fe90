"""Ops a stored CPU stage may not hold, rewritten into ATen ops by tracing their kernels
(pybuda.frontend.fx_decompose, used by fx_serde.stage_to_data): each kind of registration, several outputs,
nesting, and the ops that must be refused rather than traced."""

import operator

import pytest
import torch
from torch import nn

from pybuda.errors import ImageError
from pybuda.frontend.fx_decompose import decompose_ops
from pybuda.frontend.fx_serde import stage_from_data, stage_to_data

_lib = torch.library.Library("pybuda_decompose_test", "FRAGMENT")

# A CPU kernel registered with torch.library.impl (not a custom_op), using a constant tensor of its own.
torch.library.define("pybuda_decompose_test::shifted", "(Tensor x) -> Tensor", lib=_lib)
torch.library.impl("pybuda_decompose_test::shifted", "cpu", lambda x: x * 2 + torch.tensor([1.0, 2.0, 3.0]),
                   lib=_lib)
torch.library.register_fake("pybuda_decompose_test::shifted", lambda x: torch.empty_like(x), lib=_lib)

# A CompositeImplicitAutograd kernel calling the op above: nested decomposition.
torch.library.define("pybuda_decompose_test::shifted_sin", "(Tensor x) -> Tensor", lib=_lib)
torch.library.impl("pybuda_decompose_test::shifted_sin", "CompositeImplicitAutograd",
                   lambda x: torch.ops.pybuda_decompose_test.shifted(x).sin(), lib=_lib)


@torch.library.custom_op("pybuda_decompose_test::sin_cos", mutates_args=())
def sin_cos(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two outputs, one of them through the nested ops above."""
    return torch.ops.pybuda_decompose_test.shifted_sin(x), x.cos()


@sin_cos.register_fake
def _(x):
    return torch.empty_like(x), torch.empty_like(x)


@torch.library.custom_op("pybuda_decompose_test::recursive", mutates_args=())
def recursive(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.pybuda_decompose_test.recursive(x)


@recursive.register_fake
def _(x):
    return torch.empty_like(x)


def _stage(target, *extra, dtype=torch.float32, outputs=1):
    """``x -> target(x, *extra)`` (and its outputs through getitem when there are several), with the shapes
    torch.export records."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(2, 3, dtype=dtype)
    node = g.create_node("call_function", target, (x, *extra), name="op")
    node.meta["val"] = torch.empty(2, 3, dtype=dtype)
    if outputs == 1:
        g.output((node,))
    else:
        items = [g.create_node("call_function", operator.getitem, (node, i), name=f"item{i}") for i in range(outputs)]
        g.output((g.call_function(torch.ops.aten.add.Tensor, tuple(items)), items[1]))
    return torch.fx.GraphModule(nn.Module(), g)


def _round_trip(gm, x):
    data, tensors = stage_to_data(gm, "s")
    got, want = stage_from_data(data, tensors)(x), gm(x)
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
    return [n["target"] for n in data["nodes"] if n["op"] == "call_function"]


def test_torch_library_cpu_kernel_with_a_constant_is_stored_as_aten():
    targets = _round_trip(_stage(torch.ops.pybuda_decompose_test.shifted.default), torch.randn(2, 3))
    assert targets == ["aten.mul.Tensor", "aten.lift_fresh_copy.default", "aten.add.Tensor"]


def test_nested_ops_and_several_outputs_are_stored_as_aten():
    gm = _stage(torch.ops.pybuda_decompose_test.sin_cos.default, outputs=2)
    targets = _round_trip(gm, torch.randn(2, 3))
    assert "aten.sin.default" in targets and "aten.cos.default" in targets
    assert all(t.startswith("aten.") for t in targets), targets
    assert any(n.target is torch.ops.pybuda_decompose_test.sin_cos.default for n in gm.graph.nodes)  # untouched


def test_aten_op_outside_the_allow_list_decomposes_too():
    # aten.__and__ is refused by name (dunder), but it is a CompositeImplicitAutograd op over bitwise_and.
    gm = _stage(torch.ops.aten.__and__.Scalar, 6, dtype=torch.int64)
    assert _round_trip(gm, torch.arange(6).reshape(2, 3)) == ["aten.bitwise_and.Scalar"]


def test_nothing_to_decompose_returns_the_stage_itself():
    gm = _stage(torch.ops.aten.sin.default)
    assert decompose_ops(gm, keep=lambda target: True) is gm


@pytest.mark.parametrize("target, dtype, reason", [
    # A compiled CPU kernel is never run on fake tensors (it could read memory they do not have).
    (torch.ops.aten.__lshift__.Scalar, torch.int64, "no implementation to trace .* compiled kernel"),
    (torch.ops.pybuda_decompose_test.recursive.default, torch.float32, "calls the op itself"),
])
def test_ops_that_cannot_be_decomposed_are_refused_with_the_reason(target, dtype, reason):
    with pytest.raises(ImageError, match=rf"node 'op' \({target.namespace}.{target.__name__}\): op is not in the "
                                         rf"allow-list .*cannot be decomposed .*{reason}"):
        stage_to_data(_stage(target, *([1] if dtype == torch.int64 else []), dtype=dtype), "s")
