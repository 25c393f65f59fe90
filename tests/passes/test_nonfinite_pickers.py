"""Which pickers carry NaN and infinity (passes/graph/nonfinite.mark_nonfinite_carriers) and what that costs
(passes/lower/specials.py): the values downstream of an input whose sample held them, a constant holding them or a
value a NaN test reads get a coded copy; finite models and values a comparison reads get none."""

import torch

from pybuda.compile import compile_graph, module_to_graph
from pybuda.ir.graph import CARRIES_NONFINITE, SAMPLE_NONFINITE
from pybuda.module import PyTorchModule
from pybuda.netlist.host_io import QueueIO, queue_io
from pybuda.passes.graph.nonfinite import hold_nonfinite, mark_nonfinite_carriers
from pybuda.passes.lower.specials import NONFINITE_PART
from pybuda.passes.lower.to_tiles import lower_to_buda
from pybuda.passes.lowered.buda_eval import evaluate_buda_graph
from pybuda.passes.lowered.exact_pickers import COPIES_INPUT
from pass_helpers import ir_passes, make_ctx


class _Slice(torch.nn.Module):
    def forward(self, x):
        return x[:, 3:20] * 2.0


class _MaskConstant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.full((1, 48, 40), float("-inf")).triu(1))

    def forward(self, x):
        return (x + self.mask)[:, 3:20]


class _Compared(torch.nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, 0.0)[:, 3:20]


class _Tested(torch.nn.Module):
    def forward(self, x):
        return torch.isnan(x[:, 3:20])


def _special(shape=(1, 48, 40)):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    x[0, 5, 7], x[0, 9, 3], x[0, 10, 4] = float("nan"), float("inf"), -float("inf")
    return x


def _lowered(module, x):
    """The lowered graph of ``module`` traced for the sample ``x``, with the pipeline's NaN/infinity passes."""
    ctx = make_ctx()
    graph = ir_passes(module_to_graph(PyTorchModule("m", module.eval()), [x]).graph, ctx)
    graph = mark_nonfinite_carriers(hold_nonfinite(graph, ctx), ctx)
    return graph, lower_to_buda(graph, ctx)


def _parts(bg):
    return [op for op in bg.ops.values() if NONFINITE_PART in op.tags]


def test_a_finite_sample_adds_nothing():
    x = torch.randn(1, 48, 40)
    graph, bg = _lowered(_Slice(), x)
    assert not graph.inputs[0].tags.get(SAMPLE_NONFINITE)
    assert not any(n.tags.get(CARRIES_NONFINITE) for n in graph)
    assert not _parts(bg)


def test_an_input_sample_holding_infinities_is_carried_by_a_coded_copy():
    x = _special()
    graph, bg = _lowered(_Slice(), x)
    assert graph.inputs[0].tags.get(SAMPLE_NONFINITE)
    pickers = [op for op in bg.ops.values() if op.type == "matmul"]
    parts = _parts(bg)
    # one copying picker became two (the finite part keeps COPIES_INPUT, the code is a picker of its own), and
    # 20 elementwise ops: 11 encode, 9 decode
    assert len(pickers) == 2 and sum(COPIES_INPUT in op.tags for op in pickers) == 1
    assert len([op for op in parts if op.type != "matmul"]) == 20
    assert {op.type for op in parts if op.type != "matmul"} == {"subtract", "heaviside", "add"}
    got = evaluate_buda_graph(bg, {bg.input_order[0]: x})[bg.output_order[0]]
    want = _Slice()(x)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(got.nan_to_num(), want.nan_to_num())


def test_a_constant_holding_infinities_is_carried():
    x = torch.randn(1, 48, 40)
    graph, bg = _lowered(_MaskConstant(), x)
    assert _parts(bg)
    got = evaluate_buda_graph(bg, {bg.input_order[0]: x})[bg.output_order[0]]
    assert torch.equal(got, _MaskConstant()(x))


def test_a_comparison_does_not_make_its_operand_a_carrier():
    graph, bg = _lowered(_Compared(), torch.randn(1, 48, 40))
    assert not any(n.tags.get(CARRIES_NONFINITE) for n in graph)
    assert not _parts(bg)


def test_what_a_nan_test_reads_is_carried_whatever_the_sample():
    graph, bg = _lowered(_Tested(), torch.randn(1, 48, 40))
    assert graph.inputs[0].tags.get(CARRIES_NONFINITE)
    assert _parts(bg)


def test_compile_notes_count_the_carriers():
    x = _special()
    graph = module_to_graph(PyTorchModule("m", _Slice().eval()), [x]).graph
    assert compile_graph(graph, "wh_n150").notes["nonfinite_carriers"] > 0
    graph = module_to_graph(PyTorchModule("m", _Slice().eval()), [torch.randn(1, 48, 40)]).graph
    assert compile_graph(graph, "wh_n150").notes["nonfinite_carriers"] == 0


def test_inputs_reaching_an_uncarried_picker_are_finite_only():
    _, bg = _lowered(_Slice(), torch.randn(1, 48, 40))  # a finite sample: the slice does not carry
    rec = queue_io(bg.queues[bg.input_order[0]])
    assert rec.finite_only and QueueIO.from_dict(rec.to_dict()).finite_only
    _, bg = _lowered(_Slice(), _special())  # carried: any value may be pushed
    assert not queue_io(bg.queues[bg.input_order[0]]).finite_only
    _, bg = _lowered(_Compared(), torch.randn(1, 48, 40))  # the slice reads where's result, made from x
    assert queue_io(bg.queues[bg.input_order[0]]).finite_only


class _Strided(torch.nn.Module):
    def forward(self, x):
        return x[:, 3:40:2, 5:37] * 2.0


def test_chained_pickers_decode_once():
    """Rows, then columns: the column pickers read the row pickers' two channels; one encode, one decode."""
    x = _special()
    _, bg = _lowered(_Strided(), x)
    parts = _parts(bg)
    assert len([op for op in bg.ops.values() if op.type == "matmul"]) == 4
    assert len([op for op in parts if op.type != "matmul"]) == 20
    got = evaluate_buda_graph(bg, {bg.input_order[0]: x})[bg.output_order[0]]
    want = _Strided()(x)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(got.nan_to_num(), want.nan_to_num())


class _Pool(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.avg_pool2d(x, 2)


def test_a_carried_input_reaching_a_summing_picker_is_finite_only():
    """An average pool's picker sums (no copy to carry): NaN would spread to its window's tile neighbours."""
    x = torch.randn(1, 4, 16, 16)
    x[0, 1, 3, 3] = float("inf")
    graph, bg = _lowered(_Pool(), x)
    assert graph.inputs[0].tags.get(CARRIES_NONFINITE)
    assert queue_io(bg.queues[bg.input_order[0]]).finite_only


class _Gather(torch.nn.Module):
    def forward(self, x):
        return torch.cat([x, x[:, :7]], 1) * 2.0, x[:, torch.tensor([5, 3, 40, 1, 47, 0, 33, 34, 12, 12, 7])]


def test_the_parts_of_a_gather_are_summed_by_channel_and_decoded_once():
    x = _special()
    _, bg = _lowered(_Gather(), x)
    decodes = [op for op in bg.ops.values() if op.name.endswith(".nf_t")]
    assert len(decodes) == 2  # one per output, however many pickers each sums
    outs = evaluate_buda_graph(bg, {bg.input_order[0]: x})
    for name, want in zip(bg.output_order, _Gather()(x)):
        got = outs[name]
        assert torch.equal(torch.isnan(got), torch.isnan(want))
        assert torch.equal(got.nan_to_num(), want.nan_to_num())
