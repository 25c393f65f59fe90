"""Gathers with indices known at capture time run on the device: rolls and window shifts as slices plus a
concatenate, arbitrary patterns (relative-position tables, permutations, flips) as a one-hot matmul; an
integer mask turned into bools is a float 0/1 there. Gathers with run-time indices stay on the host."""

import pytest
import torch

import pybuda
from pybuda.frontend.aten_index import MAX_SLICE_RUNS, _strided_runs
from pybuda.frontend.torch import capture
from pybuda.verify import calculate_pcc


class Roll(torch.nn.Module):
    def forward(self, x):
        return torch.roll(x, shifts=(-2, 3), dims=(1, 2)) * 2.0


class RollFlat(torch.nn.Module):
    def forward(self, x):
        return torch.roll(x, 5) + 1.0


class RelativeBias(torch.nn.Module):
    """Swin's relative position bias: a parameter table indexed by a constant index buffer."""

    def __init__(self, window=3, heads=2):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn((2 * window - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("index", rel[..., 0] * (2 * window - 1) + rel[..., 1])
        self.heads = heads

    def forward(self, scores):
        bias = self.table[self.index.view(-1)].view(scores.shape[-1], scores.shape[-1], self.heads)
        return (scores + bias.permute(2, 0, 1)).softmax(-1)


class SelectAndFlip(torch.nn.Module):
    def __init__(self, index):
        super().__init__()
        self.register_buffer("index", index)

    def forward(self, x):  # x [2, 8, 24]: gathers along the last dim and along a middle dim, and a flip
        last = torch.index_select(x, 2, self.index) * 2.0
        middle = torch.index_select(x, 1, self.index % 8) + 1.0
        return last, middle, torch.flip(x, dims=[2]) - 1.0


class IntMask(torch.nn.Module):
    def forward(self, x, mask):
        return torch.where(mask.bool()[:, None, :], x, torch.zeros_like(x))


class RuntimeGather(torch.nn.Module):
    def forward(self, x, idx):
        return torch.gather(x * 2.0, 1, idx - 1)  # computed from a pushed index: its range is not proven


def _device_capture(module, *inputs):
    result = capture(module.eval(), inputs, for_device=True)
    assert result.report.host_fraction == 0.0, str(result.report)
    assert "adv_index" not in {n.op_type for n in result.graph.ops}
    return result


def test_strided_runs():
    assert _strided_runs([0, 1, 2, 3]) == [(0, 4, 1)]
    assert _strided_runs([3, 4, 0, 1, 2]) == [(3, 5, 1), (0, 3, 1)]  # a roll: two runs
    assert _strided_runs([0, 2, 4, 1, 3]) == [(0, 5, 2), (1, 4, 2)]
    assert _strided_runs([2, 1, 0]) == [(2, 3, 1), (1, 2, 1), (0, 1, 1)]  # descending: single elements
    assert _strided_runs([7]) == [(7, 8, 1)]


@pytest.mark.parametrize("module,shape", [(Roll(), (2, 6, 7, 5)), (RollFlat(), (3, 4))], ids=["dims", "flat"])
def test_roll_is_slices_and_a_concatenate(module, shape, fe):
    x = torch.randn(shape)
    result = _device_capture(module, x)
    assert {"concatenate", "index"} <= {n.op_type for n in result.graph.ops}
    fe.matches(result.run(x), [module(x)], atol=1e-6)


def test_relative_position_bias_is_a_one_hot_matmul(fe):
    torch.manual_seed(0)
    module = RelativeBias()
    scores = torch.randn(1, 2, 9, 9)
    result = _device_capture(module, scores)
    assert "matmul" in {n.op_type for n in result.graph.ops}
    assert "table" in {n.name for n in result.graph.parameters}  # still a trainable parameter
    fe.matches(result.run(scores), [module(scores)], atol=1e-5)


SCATTERED = [7, 0, 5, 3, 6, 1, 3, 4, 0, 2, 6, 1, 7, 2, 5, 0, 4, 4, 1, 6]


@pytest.mark.parametrize("index", [[4, 5, 6, 0, 1], SCATTERED], ids=["runs", "scattered"])
def test_index_select_and_flip(index, fe):
    few_runs = len(_strided_runs(index)) <= MAX_SLICE_RUNS
    assert few_runs == (len(index) == 5)
    index = torch.tensor(index)
    module = SelectAndFlip(index)
    x = torch.randn(2, 8, 24)
    result = _device_capture(module, x)
    assert ("concatenate" in {n.op_type for n in result.graph.ops}) == few_runs
    fe.matches(result.run(x), list(module(x)), atol=1e-5)


def test_integer_mask_becomes_a_float_mask_on_the_device(fe):
    module = IntMask()
    x = torch.randn(2, 3, 10)
    mask = torch.randint(0, 2, (2, 10))
    result = _device_capture(module, x, mask)
    fe.matches(result.run(x, mask), [module(x, mask)], atol=0)


def test_unproven_runtime_indices_stay_on_the_host(fe):
    # (a pushed index itself is bound to the gathered dim and runs on the device: test_topk_on_device)
    module = RuntimeGather()
    x = torch.randn(2, 6)
    idx = torch.tensor([[6, 1, 2], [3, 3, 5]])
    result = capture(module, (x, idx), for_device=True)
    assert result.report.has_fallback
    assert "aten.gather.default" in result.report.op_names(), str(result.report)
    fe.matches(result.run(x, idx), [module(x, idx)], atol=1e-6)


@pytest.mark.parametrize("fast", [True, False], ids=["float32", "chip_numerics"])
def test_window_shift_and_relative_bias_on_the_golden_device(fast):
    torch.manual_seed(0)

    class ShiftedWindows(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = RelativeBias()

        def forward(self, x):  # x: [1, 2, 9, 9] scores; roll the key axis, add relative biases
            return self.bias(torch.roll(x, shifts=4, dims=3))

    module = ShiftedWindows().eval()
    x = torch.randn(1, 2, 9, 9)
    want = module(x)
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32, golden_ignore_df_precision=fast)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x,)]).get(timeout=300)[0].value()
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    assert calculate_pcc(got, want) >= 0.999
    assert torch.allclose(got, want, atol=1e-5 if fast else 1e-2)


class RelativeGather(torch.nn.Module):
    """DeBERTa's disentangled attention: scores against 2 * span relative positions, gathered into
    [query, key] by a constant table of clamped relative distances (along the last dim, and along the dim
    before it for the transposed, position-to-content term)."""

    def __init__(self, seq=6, span=4):
        super().__init__()
        rel = torch.arange(seq)[:, None] - torch.arange(seq)[None, :]
        self.register_buffer("c2p", (rel + span).clamp(0, 2 * span - 1))
        self.register_buffer("p2c", (-rel + span).clamp(0, 2 * span - 1))

    def forward(self, content, positions, scores=None):  # [b, h, seq, d] @ [b, h, d, 2 * span]
        scores = content @ positions if scores is None else scores
        b, h, s, _ = scores.shape
        c2p = torch.gather(scores, -1, self.c2p.expand(b, h, s, s))
        p2c = torch.gather(scores.transpose(-1, -2), -2, self.p2c.t().expand(b, h, s, s))
        return c2p + p2c


def test_gather_by_a_constant_relative_position_table_runs_on_the_device(fe):
    torch.manual_seed(0)
    module = RelativeGather().eval()
    inputs = (torch.randn(2, 3, 6, 5), torch.randn(2, 3, 5, 8))
    result = _device_capture(module, *inputs)
    fe.matches(result.run(*inputs), [module(*inputs)], atol=1e-5)


class SmallerIndexGather(torch.nn.Module):
    """gather reads only the leading positions of the other dims when the index is smaller there."""

    def __init__(self):
        super().__init__()
        self.register_buffer("index", torch.tensor([[2, 0, 3], [1, 1, 0]]))

    def forward(self, x):  # x [4, 5]: rows 0-1, columns picked per row
        return torch.gather(x * 3.0, 1, self.index), torch.gather(x + 1.0, 0, self.index.t()[:2])


def test_gather_by_a_smaller_constant_index(fe):
    module = SmallerIndexGather().eval()
    x = torch.randn(4, 5)
    result = _device_capture(module, x)
    fe.matches(result.run(x), list(module(x)), atol=1e-6)


def test_gather_whose_selection_matrix_is_too_large_stays_on_the_host(fe, monkeypatch):
    import pybuda.frontend.aten_index as aten_index

    monkeypatch.setattr(aten_index, "MAX_ONE_HOT_ELEMENTS", 64)
    module = RelativeGather().eval()
    inputs = (torch.randn(1, 2, 6, 5), torch.randn(1, 2, 5, 8))
    result = capture(module, inputs, for_device=True)
    assert set(result.report.op_names()) == {"aten.gather.default"}, str(result.report)
    fe.matches(result.run(*inputs), [module(*inputs)], atol=1e-5)


class RelativeGatherOfSums(RelativeGather):
    def forward(self, content, positions):  # [b, h, seq, 1] + [b, h, 1, 2 * span]: no rounding before the gathers
        return super().forward(content, positions, scores=content + positions)


def test_constant_gather_is_exact_at_float32_on_the_golden_device():
    torch.manual_seed(0)
    module = RelativeGatherOfSums().eval()
    inputs = (torch.randn(1, 2, 6, 1), torch.randn(1, 2, 1, 8))
    want = module(*inputs)
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[inputs]).get(timeout=300)[0].value()
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    assert torch.allclose(got, want, rtol=0, atol=1e-6)  # the one-hot matmuls copy every value whole


class BufferedTokenTypes(torch.nn.Module):
    """RoBERTa without token_type_ids: its all-zero buffer gathered at the padding-aware position ids."""

    def __init__(self):
        super().__init__()
        self.register_buffer("token_type_ids", torch.zeros(1, 32, dtype=torch.long))
        self.types = torch.nn.Embedding(2, 8)

    def forward(self, ids, h):
        mask = ids.ne(1).int()
        positions = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + 1
        types = torch.gather(self.token_type_ids.expand(ids.shape[0], -1), dim=1, index=positions)
        return h + self.types(types)


def test_gather_of_a_uniform_buffer_at_ids_in_range_is_the_buffer_value(fe):
    ids = torch.randint(2, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    ids[:, -3:] = 1
    h = torch.randn(2, 16, 8)
    module = BufferedTokenTypes().eval()
    result = capture(module, (ids, h), config=pybuda.CompilerConfig(cpu_fallback_ops=[]), for_device=True)
    assert result.report.host_fraction == 0.0, str(result.report)
    assert "adv_index" not in {n.op_type for n in result.graph.ops}
    fe.matches(result.run(ids, h), [module(ids, h)], atol=1e-6)

    class PushedIndex(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("zeros", torch.zeros(2, 6))

        def forward(self, idx, h):
            return torch.gather(self.zeros, 1, idx) + h

    # A pushed index may be out of range (torch raises): it is bound to the gathered dim, the host refuses a push
    # outside it (test_sort_on_device), and the gather runs on the device.
    module = PushedIndex().eval()
    inputs = (torch.tensor([[5, 0, 1], [2, 2, 4]]), torch.randn(2, 3))
    result = capture(module, inputs, for_device=True)
    assert not result.report.has_fallback, str(result.report)
    assert result.graph.inputs[0].tags.get("value_range") == (0, 5)
    fe.matches(result.run(*inputs), [module(*inputs)], atol=1e-6)


class LastTokenPooling(torch.nn.Module):
    """A decoder classifier's pooling: each row's last non-pad token (the count of tokens minus one, clamped: in
    [0, seq) whatever the ids), and CLIP's: the token with the largest id."""

    def forward(self, ids, h):
        last = (torch.ne(ids, 0).int().sum(-1) - 1).clamp(min=0)
        rows = torch.arange(ids.shape[0])
        return h[rows, last] * 2.0, h[rows, ids.argmax(-1)], h.index_select(1, ids[0].argmax(-1, keepdim=True))


class PushedRowIndex(torch.nn.Module):
    def forward(self, idx, h):
        return h[torch.arange(h.shape[0]), idx] + 1.0


def test_row_wise_runtime_index_in_proven_range_runs_on_the_device(fe):
    ids = torch.randint(3, 90, (2, 12), generator=torch.Generator().manual_seed(0))
    ids[0, -3:] = 0
    h = torch.randn(2, 12, 8)
    module = LastTokenPooling().eval()
    result = capture(module, (ids, h), for_device=True)
    assert result.report.host_fraction == 0.0, str(result.report)
    assert "adv_index" not in {n.op_type for n in result.graph.ops}
    fe.matches(result.run(ids, h), list(module(ids, h)), atol=1e-6)
    # A pushed index may be out of range (torch raises): it stays on the host.
    result = capture(PushedRowIndex().eval(), (torch.tensor([3, 1]), h), for_device=True)
    assert result.report.op_names() == ["aten.index.Tensor"], str(result.report)


def test_row_wise_runtime_index_on_the_golden_device():
    ids = torch.randint(3, 90, (1, 12), generator=torch.Generator().manual_seed(1))
    ids[0, -3:] = 0
    h = torch.randn(1, 12, 8)
    module = LastTokenPooling().eval()
    want = module(ids, h)
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = [t.value() for t in pybuda.run_inference(inputs=[(ids, h)]).get(timeout=300)]
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    for g, w in zip(got, want):
        assert calculate_pcc(g, w) >= 0.999 and torch.allclose(g, w, atol=1e-2)
