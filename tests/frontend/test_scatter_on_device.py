"""Writes at indexed positions run on the device: ``x[idx] = v`` and ``x[idx] += v`` (``index_put``),
``index_add``, ``scatter``, ``scatter_add``, ``scatter_reduce(..., 'sum')`` and ``F.fold`` with indices known at
capture time become constant gathers (slices or one-hot matmuls) and ``where``s, or a matmul with a constant
0/1 matrix when indices repeat and the writes add up; a one-hot scatter of a run-time index proven in range,
or pushed (the host checks each push), becomes comparisons with ``arange``; a boolean mask with one value
becomes a ``where``. What the device
cannot do (other reductions, unproven run-time indices) runs on the CPU with a fallback report."""

import pytest
import torch
import torch.nn.functional as F

import pybuda
from pybuda.frontend.torch import capture
from pybuda.verify import calculate_pcc


class Fold(torch.nn.Module):
    """MobileViT's patches back into a feature map: unfold, a per-patch op, fold (no overlap)."""

    def forward(self, x):  # x [1, 3, 8, 8]
        patches = F.unfold(x, kernel_size=2, stride=2)  # [1, 12, 16]
        return F.fold(patches * 2.0 + 1.0, output_size=(8, 8), kernel_size=2, stride=2)


class FoldOverlap(torch.nn.Module):
    """col2im of overlapping 3x3 windows with padding: positions written up to nine times, summed."""

    def forward(self, x):  # x [2, 18, 36]
        return F.fold(x.tanh(), output_size=(6, 6), kernel_size=3, stride=1, padding=1)


class Assign(torch.nn.Module):
    def forward(self, x, v):  # x [2, 6, 4], v [2, 3, 4]
        y = x * 1.5
        y[:, torch.tensor([0, 5, 2])] = v + 1.0
        return y


class AssignRepeated(torch.nn.Module):
    """Two writes to one row: the last one is kept, as on torch's CPU."""

    def forward(self, x, v):
        y = x + 0.0
        y[torch.tensor([3, 1, 3])] = v
        return y


class AssignNumber(torch.nn.Module):
    def forward(self, x):  # x [4, 5]: a number into a tensor; negative indices count from the end
        y = x.exp()
        y[torch.tensor([0, -1]), torch.tensor([2, 4])] = -3.0
        return y


class IndexAdd(torch.nn.Module):
    def forward(self, x, v):  # x [2, 6, 4], v [2, 3, 4]
        return x.index_add(1, torch.tensor([0, 2, 2]), v, alpha=0.5)


class MessagePassing(torch.nn.Module):
    """A graph convolution over a fixed graph: messages along edges summed at their targets."""

    def __init__(self):
        super().__init__()
        self.register_buffer("src", torch.tensor([0, 1, 1, 2, 3, 4, 0]))
        self.register_buffer("dst", torch.tensor([1, 0, 2, 1, 4, 3, 3]))
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, h):  # h [5 nodes, 8]
        messages = self.lin(h)[self.src]
        index = self.dst[:, None].expand(-1, 8)
        return torch.zeros(5, 8).scatter_add(0, index, messages).relu()


class ScatterIntoInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("index", torch.tensor([[2, 0], [1, 3], [0, 0]]))

    def forward(self, x, s):  # x [3, 4], s [3, 5]: only s[:, :2] is read
        return x.scatter(1, self.index, s), x.scatter(1, self.index, 7.0), x.scatter(1, self.index, s, reduce="add")


class ScatterReduceSum(torch.nn.Module):
    def __init__(self, include_self):
        super().__init__()
        self.include_self = include_self
        self.register_buffer("index", torch.tensor([[0, 2, 2, 1], [1, 1, 0, 0]]))

    def forward(self, x, s):  # x [2, 3], s [2, 4]
        return x.scatter_reduce(1, self.index, s, "sum", include_self=self.include_self)


class OneHotOfArgmax(torch.nn.Module):
    """A hard one-hot of the prediction (straight-through estimators, GroupViT's hard assignment)."""

    def forward(self, x):  # x [3, 7]
        y = x.softmax(-1)
        hard = torch.zeros_like(y).scatter_(-1, y.argmax(-1, keepdim=True), 1.0)
        return hard - y.detach() + y


class ExtremesMarked(torch.nn.Module):
    """Two run-time indices per row (the largest and the smallest entry), a mark added at each."""

    def forward(self, x):  # x [3, 7]
        idx = torch.cat([x.argmax(-1, keepdim=True), x.argmin(-1, keepdim=True)], dim=-1)
        return x.scatter_add(-1, idx, torch.full((3, 2), 0.5))


class MaskedAssign(torch.nn.Module):
    def forward(self, x):
        y = x * 2.0
        y[y < 0] = 0.25
        return y


CASES = [
    (Fold(), [(1, 3, 8, 8)]),
    (FoldOverlap(), [(2, 18, 36)]),
    (Assign(), [(2, 6, 4), (2, 3, 4)]),
    (AssignRepeated(), [(5, 4), (3, 4)]),
    (AssignNumber(), [(4, 5)]),
    (IndexAdd(), [(2, 6, 4), (2, 3, 4)]),
    (MessagePassing(), [(5, 8)]),
    (ScatterIntoInput(), [(3, 4), (3, 5)]),
    (ScatterReduceSum(True), [(2, 3), (2, 4)]),
    (ScatterReduceSum(False), [(2, 3), (2, 4)]),
    (OneHotOfArgmax(), [(3, 7)]),
    (ExtremesMarked(), [(3, 7)]),
    (MaskedAssign(), [(4, 6)]),
]
IDS = ["fold", "fold_overlap", "assign", "assign_repeated", "assign_number", "index_add", "message_passing",
       "scatter", "scatter_reduce_sum", "scatter_reduce_sum_excluding_self", "one_hot_of_argmax", "extremes_marked", "masked_assign"]


def _inputs(shapes):
    torch.manual_seed(0)
    return [torch.randn(s) for s in shapes]


@pytest.mark.parametrize("module,shapes", CASES, ids=IDS)
def test_scatter_is_captured_for_the_device(module, shapes, fe):
    inputs = _inputs(shapes)
    module = module.eval()
    result = capture(module, tuple(inputs), for_device=True)
    assert result.report.host_fraction == 0.0, str(result.report)
    assert "adv_index" not in {n.op_type for n in result.graph.ops}
    fe.matches(result.run(*inputs), fe.torch_outputs(module, inputs), atol=1e-5)


@pytest.mark.parametrize("module,shapes", [CASES[0], CASES[1], CASES[6], CASES[10]],
                         ids=["fold", "fold_overlap", "message_passing", "one_hot_of_argmax"])
@pytest.mark.parametrize("fast", [True, False], ids=["float32", "chip_numerics"])
def test_scatter_runs_on_the_golden_device(module, shapes, fast):
    inputs = _inputs(shapes)
    module = module.eval()
    with torch.no_grad():
        want = module(*inputs)
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32, golden_ignore_df_precision=fast)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[tuple(inputs)]).get(timeout=300)[0].value()
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    assert calculate_pcc(got, want) >= 0.999
    assert torch.allclose(got, want, atol=1e-5 if fast else 2e-2)


class ScatterMax(torch.nn.Module):
    def forward(self, x, s):
        return x.scatter_reduce(1, torch.tensor([[0, 2, 2, 1], [1, 1, 0, 0]]), s, "amax")


class RuntimeIndexPut(torch.nn.Module):
    def forward(self, x, idx):
        y = x * 2.0
        y[idx] = 1.0
        return y


class UnprovenRuntimeScatter(torch.nn.Module):
    def forward(self, x, idx):  # computed from a pushed index: the host's check cannot bound it
        return torch.zeros_like(x).scatter(1, idx - 1, x)


@pytest.mark.parametrize("module,inputs,op", [
    (ScatterMax(), (torch.randn(2, 3), torch.randn(2, 4)), "aten.scatter_reduce.two"),
    (RuntimeIndexPut(), (torch.randn(5, 3), torch.tensor([4, 0])), "aten.index_put.default"),
    (UnprovenRuntimeScatter(), (torch.randn(2, 3), torch.tensor([[3], [1]])), "aten.scatter.src"),
], ids=["amax", "runtime_index_put", "unproven_runtime_scatter"])
def test_what_the_device_cannot_scatter_runs_on_the_cpu(module, inputs, op, fe):
    result = capture(module.eval(), inputs, for_device=True)
    assert result.report.has_fallback
    assert op in result.report.op_names(), str(result.report)
    fe.matches(result.run(*inputs), fe.torch_outputs(module, list(inputs)), atol=1e-6)


class PushedTargets(torch.nn.Module):
    """Message passing along pushed edges: node ``i`` sends its message to node ``targets[i]`` (one graph per push),
    summed there with scatter_add and, again, with index_add."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, h, targets):  # h [1, 5, 8], targets [1, 5]
        h, targets = h[0], targets[0]
        messages = self.lin(h)
        summed = torch.zeros_like(h).scatter_add(0, targets[:, None].expand(-1, 8), messages)
        return (summed.relu() + h.index_add(0, targets, messages * 0.5))[None]


TARGETS = torch.tensor([[1, 0, 1, 4, 3]])


@pytest.mark.parametrize("fast", [True, False], ids=["float32", "chip_numerics"])
def test_pushed_targets_are_scattered_on_the_device(fast):
    # The targets are a run-time index: each becomes a one-hot row (a comparison with arange) and the sums one
    # matmul; the host checks every pushed index against the node count, as torch raises on one out of range.
    torch.manual_seed(0)
    module = PushedTargets().eval()
    h = torch.randn(1, 5, 8)
    with torch.no_grad():
        want = module(h, TARGETS)
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32, golden_ignore_df_precision=fast)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(h, TARGETS)]).get(timeout=300)[0].value()
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    assert calculate_pcc(got, want) >= 0.999
    assert torch.allclose(got, want, atol=1e-5 if fast else 2e-2)


def test_a_pushed_index_out_of_range_is_refused_at_the_push():
    module = PushedTargets().eval()
    h = torch.randn(1, 5, 8)
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module), arch=pybuda.BackendDevice.Wormhole_B0)
    pybuda.run_inference(inputs=[(h, TARGETS)]).get(timeout=300)
    bad = TARGETS.clone()
    bad[0, 2] = 5  # one past the last node: torch raises, the device would drop the message
    with pytest.raises(pybuda.errors.InputError, match=r"compiled for \[0, 4\].*first value outside: 5"):
        pybuda.run_inference(inputs=[(h, bad)]).get(timeout=300)


class PushedAccumulate(torch.nn.Module):
    def forward(self, h, targets):  # index_put counts a negative index from the end
        h, targets = h[0], targets[0]
        return torch.index_put(h * 0.5, (targets,), h.tanh(), accumulate=True)[None]


def _matches_on_the_device_and_refuses(module, inputs, bad_inputs, refusal):
    """``module`` runs wholly on the golden device (plain float32) and matches torch on ``inputs``; a push of
    ``bad_inputs`` is an InputError matching ``refusal``."""
    module = module.eval()
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32, golden_ignore_df_precision=True)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[inputs]).get(timeout=300)[0].value()
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    assert torch.allclose(got, module(*inputs), atol=1e-5)
    with pytest.raises(pybuda.errors.InputError, match=refusal):
        pybuda.run_inference(inputs=[bad_inputs]).get(timeout=300)


def test_a_pushed_index_counting_from_the_end_is_wrapped_on_the_device():
    h = torch.randn(1, 5, 8)
    _matches_on_the_device_and_refuses(PushedAccumulate(), (h, torch.tensor([[1, -1, 0, -5, 4]])),
                                       (h, torch.tensor([[1, -6, 0, 2, 4]])), r"\[-5, 4\].*first value outside: -6")


class EdgeList(torch.nn.Module):
    """PyTorch Geometric's layout: one pushed ``[2, E]`` edge list, sources into 5 nodes, targets into 3 (a
    bipartite graph). Each row of the list is bound to its own node count at the push."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, h, edges):  # h [1, 5, 8], edges [1, 2, E]
        h, sources, targets = h[0], edges[0, 0], edges[0, 1]
        messages = self.lin(h)[sources]
        return torch.zeros(3, 8).index_add(0, targets, messages).relu()[None]


def test_an_edge_list_gathers_and_scatters_on_the_device():
    h, edges = torch.randn(1, 5, 8), torch.tensor([[[0, 4, 2, 4, 1, 3], [2, 0, 1, 2, 0, 1]]])
    bad = edges.clone()
    bad[0, 1, 3] = 3  # a target past the 3 target nodes (a source may be 3)
    _matches_on_the_device_and_refuses(EdgeList(), (h, edges), (h, bad),
                                       r"\[1:2\] along dim 1.*\[0, 2\].*first value outside: 3")


def test_an_image_keeps_the_bounds_of_each_row_of_an_edge_list(tmp_path):
    h, edges = torch.randn(1, 5, 8), torch.tensor([[[0, 4, 2, 4, 1, 3], [2, 0, 1, 2, 0, 1]]])
    module = EdgeList().eval()
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module), arch=pybuda.BackendDevice.Wormhole_B0)
    path = str(tmp_path / "edges.tti")
    device.compile_to_image(img_path=path, sample_inputs=(h, edges))
    pybuda.pybuda_reset()
    image = pybuda.TTDeviceImage.load_from_disk(path)
    pybuda.TTDevice.load_image(img=image)
    bad = edges.clone()
    bad[0, 1, 3] = 3
    with pytest.raises(pybuda.errors.InputError, match=r"\[1:2\] along dim 1.*first value outside: 3"):
        pybuda.run_inference(inputs=[(h, bad)]).get(timeout=300)


class SegmentMean(torch.nn.Module):
    """A set readout: per-segment means over a pushed segment id per element (sums and counts by index_add)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.phi = torch.nn.Linear(6, 6)
        self.rho = torch.nn.Linear(6, 2)

    def forward(self, x, segments):  # x [1, 9, 6], segments [1, 9] in [0, 4)
        pooled = torch.zeros(4, 6).index_add(0, segments[0], self.phi(x[0]).relu())
        counts = torch.zeros(4).index_add(0, segments[0], torch.ones(9))
        return self.rho(pooled / counts.clamp(min=1)[:, None])[None]


def test_a_segment_mean_over_pushed_segment_ids_runs_on_the_device():
    torch.manual_seed(0)
    x, segments = torch.randn(1, 9, 6), torch.tensor([[0, 1, 1, 3, 2, 0, 3, 3, 1]])
    bad = segments.clone()
    bad[0, 4] = 4
    _matches_on_the_device_and_refuses(SegmentMean(), (x, segments), (x, bad), r"\[0, 3\].*first value outside: 4")


class PerSampleMessagePassing(torch.nn.Module):
    """Each sample its own graph: messages gathered by source and summed into targets with ``scatter_add`` along
    dim 1 of a ``[batch, nodes, features]`` tensor (the index varies along the batch too), degrees the same way."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.lin = torch.nn.Linear(8, 6)

    def forward(self, x, src, dst):  # x [b, 7, 8], src/dst [b, 12] in [0, 7)
        h = self.lin(x)
        msg = torch.gather(h, 1, src.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
        agg = torch.zeros_like(h).scatter_add(1, dst.unsqueeze(-1).expand(-1, -1, h.shape[-1]), msg)
        deg = torch.zeros(h.shape[:2]).scatter_add(1, dst, torch.ones(dst.shape))
        return (agg / deg.clamp(min=1.0).unsqueeze(-1)).relu()


def test_a_scatter_add_of_each_samples_own_edges_runs_on_the_device():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 7, 8, generator=g)
    src, dst = torch.randint(0, 7, (2, 12), generator=g), torch.randint(0, 7, (2, 12), generator=g)
    bad = dst.clone()
    bad[1, 5] = 7  # one past the last node: torch raises, the device would drop the message
    _matches_on_the_device_and_refuses(PerSampleMessagePassing(), (x, src, dst), (x, src, bad),
                                       r"\[0, 6\].*first value outside: 7")
