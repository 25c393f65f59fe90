"""Every registry op's backward against torch autograd applied to the op's own registry ``eval``.

Each case is a one-op graph whose operands are parameters (shapes that are not multiples of 32); the
operand under test is the only trainable one. The backward graph is built by autograd and executed with
the CPU reference (``run_graph_on_cpu``), then compared with ``torch.autograd`` through
``registry.evaluate`` at float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import pytest
import torch

from pybuda.ir.graph import Graph
from pybuda.ops import registry
from pybuda.passes.graph.autograd import build_training_graphs, run_training_graphs_on_cpu
from pybuda.verify import calculate_pcc

RTOL = 1e-4
ATOL = 1e-5
PCC = 0.99
# Composite backwards (layernorm/batchnorm statistics, gelu/erf formulas, convolutions summing hundreds of
# products in another order) differ from torch's fused kernels by float32 rounding of sums: a few ulps of the
# largest partial sum, so the absolute tolerance scales with the magnitude of the gradient.
ATOL_SUMS = 1e-4

A = (1, 3, 17, 45)

Spec = Union[Tuple[int, ...], torch.Tensor, Callable[[torch.Generator], torch.Tensor]]


def pos(*shape: int, low: float = 0.5) -> Callable[[torch.Generator], torch.Tensor]:
    """Values in [low, low + 1): away from log/sqrt/reciprocal singularities."""
    return lambda g: torch.rand(shape, generator=g) + low


def ints(values: Sequence[int], dtype=torch.int64) -> torch.Tensor:
    return torch.tensor(list(values), dtype=dtype)


@dataclass
class Case:
    op: str
    operands: List[Spec]
    attrs: Dict[str, Any] = field(default_factory=dict)
    grad_operands: Optional[Sequence[int]] = None  # default: every float operand
    atol: float = ATOL
    rtol: float = RTOL
    label: str = ""

    def values(self, seed: int = 0) -> List[torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        out = []
        for spec in self.operands:
            if isinstance(spec, torch.Tensor):
                out.append(spec.clone())
            elif callable(spec):
                out.append(spec(g))
            else:
                out.append(torch.randn(spec, generator=g))
        return out


def C(op, *operands, label="", grad_operands=None, atol=ATOL, rtol=RTOL, **attrs) -> Case:
    return Case(op, list(operands), attrs, grad_operands, atol, rtol, label)


CASES: List[Case] = [
    # --- eltwise binary, same shape and broadcast ---
    C("add", A, A), C("add", A, (17, 1), label="bcast"), C("add", (17, 1), (1, 3, 1, 45), label="bcast_both"),
    C("subtract", A, A), C("subtract", (3, 1, 45), A, label="bcast"),
    C("multiply", A, A), C("multiply", A, (1, 3, 1, 1), label="bcast"),
    C("divide", A, pos(*A)), C("divide", A, pos(17, 45), label="bcast"),
    C("maximum", A, A), C("maximum", A, (45,), label="bcast"),
    C("minimum", A, A), C("minimum", (1, 1, 17, 1), A, label="bcast"),
    C("power", pos(*A), lambda g: torch.randn(A, generator=g) * 0.5),
    C("power", pos(*A), lambda g: torch.randn((1, 3, 1, 1), generator=g), label="bcast"),
    C("where", lambda g: (torch.rand(A, generator=g) > 0.5).float(), A, (17, 1), label="bcast"),
    # --- eltwise unary ---
    C("abs", A), C("exp", A), C("log", pos(*A)), C("reciprocal", pos(*A)), C("sqrt", pos(*A)),
    C("sigmoid", A), C("sine", A), C("cosine", A), C("tanh", A), C("erf", A, atol=ATOL_SUMS), C("square", A),
    C("nop", A), C("buffer", A), C("tilize", A),
    C("identity", A), C("identity", A, unsqueeze="unsqueeze", unsqueeze_dim=1, label="unsqueeze"),
    C("identity", A, unsqueeze="squeeze", unsqueeze_dim=0, label="squeeze"),
    C("cast", A, dtype="float64"), C("cast", A, dtype="float32", label="same"),
    C("relu", A), C("relu", A, threshold=0.3, label="threshold"), C("relu", A, threshold=-0.2, mode="max", label="max"),
    C("leaky_relu", A, alpha=0.1),
    C("gelu", A, atol=ATOL_SUMS), C("gelu_derivative", A, atol=ATOL_SUMS), C("gelu", A, approximate="tanh", atol=ATOL_SUMS, label="tanh"),
    C("pow", A, exponent=2.0), C("pow", A, exponent=3.0, label="cube"), C("pow", pos(*A), exponent=0.5, label="sqrt"),
    C("pow", pos(*A), exponent=-1.5, label="neg"), C("pow", A, exponent=1.0, label="one"),
    C("clip", A, min=-0.5, max=0.7),
    C("dropout", A, p=0.3, seed=3), C("dropout", A, p=0.5, training=False, label="eval"),
    C("dram_queue", A, num_entries=2),
    # --- reduce ---
    C("reduce_sum", A, dim=-1), C("reduce_sum", A, dim=-2, label="r"), C("reduce_sum", A, dim=1, label="z"),
    C("reduce_avg", A, dim=-1), C("reduce_avg", A, dim=-3, label="z"),
    C("reduce_max", A, dim=-1), C("reduce_max", A, dim=-2, label="r"),
    C("reduce_max", A, dim=-1, stride=9, label="stride"),
    C("grouped_reduce_avg", A, dim=-1, groups=5),
    C("grouped_reduce_avg", A, dim=-1, groups=9, keep_dims=True, label="keep"),
    C("grouped_reduce_avg", A, dim=-2, groups=17, label="r"),
    # --- matmul ---
    C("matmul", A, (45, 19), atol=ATOL_SUMS), C("matmul", (3, 17, 45), (3, 45, 7), (7,), label="bias", atol=ATOL_SUMS),
    C("matmul", (17, 45), (2, 45, 5), (17, 1), label="bcast_a", atol=ATOL_SUMS),
    C("sparse_matmul", (17, 45), (1, 3, 45, 5), atol=ATOL_SUMS),
    # --- tm ---
    C("hslice", A, slices=5), C("hslice", (17, 45), slices=3, label="rank2"),
    C("hstack", (1, 15, 17, 9), slices=5), C("hstack", A, label="all"),
    C("vslice", A, slices=17), C("vstack", (1, 6, 17, 45), slices=3),
    C("transpose", A, dim0=-1, dim1=-2), C("transpose", A, dim0=1, dim1=3, label="zc"),
    C("transpose", A, dim0=0, dim1=2, label="wr"),
    C("reshape", A, shape=(3, 17, 45)), C("reshape", A, shape=(-1, 45), label="infer"),
    C("index", A, dim=-1, start=2, stop=40), C("index", A, dim=-1, start=1, stop=44, stride=3, label="stride"),
    C("index", A, dim=1, start=1, label="single"), C("index", A, dim=-2, start=-5, label="negative"),
    C("adv_index", A, ints([0, 5, 5, 16, -1]), dim=-2),
    C("adv_index", (23, 45), ints([3, 0, 22]), label="dim0"),
    C("adv_index", (10,), ints([7]), label="rank1"),  # nll_loss's pick of one log-probability (was a rank-1 matmul)
    C("select", A, dim=-1, index=(2, 3), stride=13), C("select", A, dim=-2, index=(2, 2), stride=4, label="past_end"),
    C("select", A, dim=-1, index=7, label="single"),
    C("narrow", A, dim=-1, start=5, length=30), C("narrow", A, dim=1, start=1, length=2, label="z"),
    C("pad", A, pad=(2, 3)), C("pad", A, pad=(1, 2, 3, 4), value=0.5, label="rc"),
    C("pad", A, pad=(2, 3, 1, 1), mode="replicate", label="replicate"),
    C("pad", A, pad=(3, 2, 4, 1), mode="reflect", label="reflect"),
    C("pad", (1, 17, 45, 3), pad=(1, 1, 2, 2), channel_last=True, label="channel_last"),
    C("pad_tile", A, dim=-1, original_length=45), C("pad_tile", A, dim=-2, original_length=17, label="r"),
    C("buda_pad", A, paddings=(1, 1), value=0.0), C("buda_pad", A, paddings=(0, 2), value=1.5, label="cols"),
    C("buda_unpad", (1, 3, 64, 50), original_length=(17, 45), paddings=(1, 0)),
    C("broadcast", (1, 3, 1, 45), dim=-2, shape=17), C("broadcast", (3, 17, 45), dim=-4, shape=2, label="new_dim"),
    C("repeat", (3, 17, 5), factors=(2, 1, 1, 3)), C("repeat", A, factors=(1, 2, 1, 1), label="z"),
    C("squeeze", A, dim=0), C("unsqueeze", A, dim=2),
    C("pixel_shuffle", (1, 12, 5, 7), upscale_factor=2),
    C("concatenate", (1, 3, 17, 5), (1, 3, 17, 7), (1, 3, 17, 1), axis=-1),
    C("concatenate", (1, 2, 17, 5), (1, 1, 17, 5), axis=1, label="z"),
    C("stack", (3, 17, 5), (3, 17, 5), axis=1), C("stack", (3, 17, 5), (3, 17, 5), (3, 17, 5), axis=-1, label="last"),
    C("interleave", A, A, A, axis=-3), C("interleave", A, A, axis=-1, stride=5, label="stride"),
    C("binary_stack", A, A, dim=-1), C("binary_stack", A, A, dim=1, label="z"),
    # --- nn ---
    C("softmax", A, dim=-1), C("softmax", A, dim=1, label="z"),
    C("log_softmax", A, dim=-1), C("log_softmax", A, dim=-2, label="r"),
    C("layernorm", A, (45,), (45,), atol=ATOL_SUMS),
    C("layernorm", A, (1, 17), (17,), dim=-2, epsilon=1e-3, label="r", atol=ATOL_SUMS),
    C("batchnorm", A, (3,), (3,), (3,), pos(3), atol=ATOL_SUMS),
    C("batchnorm", (7, 3), (3,), (3,), (3,), pos(3), label="rank2", atol=ATOL_SUMS),
    # --- conv ---
    C("conv2d", A, (4, 3, 3, 3), (4,), padding=1, atol=ATOL_SUMS),
    C("conv2d", A, (4, 3, 3, 2), stride=2, padding=(1, 0, 2, 1), label="stride_asym", atol=ATOL_SUMS),
    C("conv2d", A, (2, 3, 3, 3), dilation=2, stride=(1, 3), label="dilation", atol=ATOL_SUMS),
    C("conv2d", A, (6, 1, 3, 3), (6,), groups=3, padding="same", label="groups", atol=ATOL_SUMS),
    C("conv2d", (1, 17, 45, 4), (4, 2, 4, 4), groups=2, padding="same", channel_last=True, label="cl_even",
      atol=ATOL_SUMS),
    C("conv2d", (3, 17, 45), (2, 3, 1, 1), label="unbatched", atol=ATOL_SUMS),
    C("conv2d_transpose", (1, 3, 9, 11), (3, 4, 3, 3), (4,), stride=2, padding=1, output_padding=1,
      atol=ATOL_SUMS),
    C("conv2d_transpose", (2, 4, 7, 5), (4, 2, 3, 2), groups=2, dilation=2, padding=(0, 1, 1, 0),
      label="groups", atol=ATOL_SUMS),
    C("conv2d_transpose", (1, 9, 11, 3), (3, 2, 2, 2), stride=(2, 1), channel_last=True, label="cl",
      atol=ATOL_SUMS),
    C("conv3d", (1, 2, 5, 7, 9), (3, 2, 2, 3, 3), (3,), stride=(1, 2, 2), padding=1, atol=ATOL_SUMS),
    C("conv3d", (1, 4, 5, 6, 7), (4, 2, 3, 3, 2), groups=2, dilation=(1, 2, 1), stride=(2, 1, 2), label="groups",
      atol=ATOL_SUMS),
    # --- pool ---
    C("max_pool1d", (1, 3, 45), kernel_size=3, stride=2, padding=1),
    C("max_pool2d", A, kernel_size=3, stride=2, padding=1),
    C("max_pool2d", A, kernel_size=2, stride=2, ceil_mode=True, label="ceil"),
    C("max_pool2d", A, kernel_size=3, stride=1, dilation=2, padding=(0, 2, 1, 0), label="dil_asym"),
    C("max_pool2d", (1, 17, 45, 3), kernel_size=(3, 2), stride=(2, 3), padding="same", channel_last=True,
      label="cl"),
    C("max_pool3d", (1, 2, 5, 7, 9), kernel_size=2, stride=2, ceil_mode=True),
    C("avg_pool1d", (1, 3, 45), kernel_size=3, stride=2, padding=1, count_include_pad=False),
    C("avg_pool2d", A, kernel_size=3, stride=2, padding=1),
    C("avg_pool2d", A, kernel_size=2, stride=2, ceil_mode=True, count_include_pad=False, label="ceil"),
    C("avg_pool2d", A, kernel_size=3, stride=2, divisor_override=4, padding=1, label="divisor"),
    C("avg_pool2d", A, kernel_size=3, stride=(1, 2), padding=(0, 1, 1, 0), count_include_pad=False,
      label="asym"),
    C("avg_pool2d", (1, 17, 45, 3), kernel_size=2, stride=2, channel_last=True, label="cl"),
    C("avg_pool3d", (1, 2, 5, 7, 9), kernel_size=2, stride=1, padding=1),
    # --- misc ---
    C("embedding", (23, 45), lambda g: torch.randint(0, 23, (1, 3, 17), generator=g)),
    C("embedding", (23, 45), ints([[1, -1, 4, 1]]), label="negative"),
    C("resize2d", A, sizes=(34, 20)), C("resize2d", A, sizes=(30, 64), method="bilinear", label="bilinear"),
    C("resize2d", A, sizes=(9, 50), method="bilinear", align_corners=True, label="bilinear_ac"),
    C("resize2d", A, sizes=(20, 30), method="cubic", label="cubic"),
    C("resize2d", (1, 17, 45, 3), sizes=(8, 90), channel_last=True, label="cl"),
    C("resize3d", (1, 2, 4, 5, 6), sizes=(8, 3, 7), method="linear"),
    C("resize3d", (1, 2, 4, 5, 6), sizes=(2, 10, 12), label="nearest"),
    C("cumsum", A, axis=-1), C("cumsum", A, axis=1, exclusive=True, label="exclusive"),
    C("index_copy", A, ints([2, 7, 0]), (1, 3, 3, 45), dim=-2),
]


def _case_id(case: Case) -> str:
    return case.op + (f"-{case.label}" if case.label else "")


PARAMS = []
for _case in CASES:
    _vals = _case.values()
    _grads = _case.grad_operands
    if _grads is None:
        _grads = [i for i, v in enumerate(_vals) if v.dtype.is_floating_point]
        if _case.op in ("where",):
            _grads = [i for i in _grads if i != 0]
    for _i in _grads:
        PARAMS.append(pytest.param(_case, _i, id=f"{_case_id(_case)}-op{_i}"))


def one_op_graph(case: Case, values: Sequence[torch.Tensor], trainable: Sequence[int]) -> Graph:
    graph = Graph(f"one_{case.op}")
    names = []
    for i, value in enumerate(values):
        name = f"operand{i}"
        if value.dtype.is_floating_point:
            graph.add_parameter(name, value, requires_grad=i in trainable)
        else:
            graph.add_constant(name, value)
        names.append(name)
    graph.add_op("op", case.op, names, case.attrs)
    graph.add_output("out", "op")
    return graph


def torch_grads(case: Case, values: Sequence[torch.Tensor], grad_out: torch.Tensor,
                trainable: Sequence[int]) -> List[Optional[torch.Tensor]]:
    leaves = [v.clone().requires_grad_(i in trainable) for i, v in enumerate(values)]
    out = registry.evaluate(case.op, leaves, case.attrs)
    out.backward(grad_out.to(out.dtype))
    return [leaf.grad for leaf in leaves]


def assert_grad_close(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {list(got.shape)} != {list(want.shape)}"
    got, want = got.to(torch.float32), want.to(torch.float32)
    if want.abs().max() > 0 and want.numel() > 1 and want.std() > 0:
        pcc = calculate_pcc(got, want)
        assert pcc >= PCC, f"{what}: PCC {pcc:.5f} < {PCC}"
    assert torch.allclose(got, want, rtol=rtol, atol=atol), (
        f"{what}: max abs diff {(got - want).abs().max().item():.3g} (rtol {rtol}, atol {atol})")


@pytest.mark.parametrize("case,operand", PARAMS)
def test_backward_matches_torch_autograd(case: Case, operand: int):
    values = case.values()
    graph = one_op_graph(case, values, [operand])
    tg = build_training_graphs(graph)
    assert list(tg.param_grads) == [f"operand{operand}"]
    grad_out = torch.randn(graph["op"].shape, generator=torch.Generator().manual_seed(1))
    _, grads = run_training_graphs_on_cpu(tg, [], [grad_out])
    want = torch_grads(case, values, grad_out, [operand])[operand]
    got = grads[f"operand{operand}"]
    if want is None:  # torch says no path (e.g. eval-mode dropout is a plain identity, still a path)
        want = torch.zeros_like(values[operand])
    assert_grad_close(got, want, case.rtol, case.atol, f"{_case_id(case)} operand {operand}")


def test_all_operands_trainable_at_once():
    """Several trainable operands of one op: every gradient output, in parameter order."""
    case = C("matmul", (3, 17, 45), (3, 45, 7), (7,), atol=ATOL_SUMS)
    values = case.values()
    graph = one_op_graph(case, values, [0, 1, 2])
    tg = build_training_graphs(graph)
    assert [n.name for n in tg.backward.outputs] == ["grad.operand0", "grad.operand1", "grad.operand2"]
    grad_out = torch.randn(graph["op"].shape)
    _, grads = run_training_graphs_on_cpu(tg, [], [grad_out])
    want = torch_grads(case, values, grad_out, [0, 1, 2])
    for i in range(3):
        assert_grad_close(grads[f"operand{i}"], want[i], RTOL, ATOL_SUMS, f"operand {i}")


def test_every_registry_op_has_backward_or_is_marked():
    missing = [op.name for op in registry.all_ops() if op.backward is None]
    assert not missing, f"ops with neither a backward nor NO_GRADIENT: {missing}"


def test_every_differentiable_op_is_tested_here():
    tested = {case.op for case in CASES}
    untested = [op.name for op in registry.all_ops() if op.differentiable and op.name not in tested]
    assert not untested, f"differentiable ops without a backward test case: {untested}"


NON_DIFFERENTIABLE = {"equal", "not_equal", "greater", "less", "greater_equal", "less_equal", "logical_and",
                      "logical_not", "heaviside", "argmax", "quantize", "dequantize", "requantize",
                      "buda_requantize", "constant", "lookup_digits"}


def test_non_differentiable_ops_are_the_expected_ones():
    marked = {op.name for op in registry.all_ops() if op.backward is registry.NO_GRADIENT}
    assert marked == NON_DIFFERENTIABLE
    assert not any(registry.get(name).differentiable for name in marked)
