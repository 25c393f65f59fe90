"""Capturing for the chip: ops the compiler cannot lower go to the CPU (or are reported as unsupported)."""

import pytest
import torch

import pybuda
from pybuda.errors import UnsupportedOpError
from pybuda.frontend.torch import capture
from pybuda.verify import calculate_pcc


class MaskedScores(torch.nn.Module):
    """Integer mask arithmetic (host work on the chip) feeding float math (device work)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x, mask):
        keep = (mask.unsqueeze(-1) * 2 - 1).to(torch.float32)  # int64 ops, then a cast
        return torch.softmax(self.proj(x) * keep, dim=-1)


def _inputs():
    torch.manual_seed(0)
    return torch.randn(1, 16, 32), torch.randint(0, 2, (1, 16))


def test_integer_ops_fall_back_to_cpu_when_capturing_for_the_device():
    model = MaskedScores().eval()
    result = capture(model, _inputs(), config=pybuda.CompilerConfig(), for_device=True)
    pre, graph, post = result.split_for_devices()
    assert pre is not None and post is None
    assert all(n.dtype.is_floating_point for n in graph.ops)
    report = str(result.report)
    assert "int64" in report or "integer" in report


def test_cpu_reference_capture_keeps_integer_ops_in_the_graph():
    result = capture(MaskedScores().eval(), _inputs(), config=pybuda.CompilerConfig())
    pre, graph, post = result.split_for_devices()
    assert pre is None and any(not n.dtype.is_floating_point for n in graph.ops)


def test_fallback_off_lists_device_unsupported_ops():
    config = pybuda.CompilerConfig(enable_tvm_cpu_fallback=False)
    with pytest.raises(UnsupportedOpError) as info:
        capture(MaskedScores().eval(), _inputs(), config=config, for_device=True)
    assert "test_device_capabilities.py" in str(info.value)


def test_model_with_integer_preprocessing_runs_on_the_simulated_chip():
    model = MaskedScores().eval()
    x, mask = _inputs()
    module = pybuda.PyTorchModule("masked", model)
    pybuda.TTDevice("tt0", module=module, arch=pybuda.BackendDevice.Wormhole_B0)
    try:
        out = pybuda.run_inference(inputs=[(x, mask)]).get()[0].value()
    finally:
        pybuda.shutdown()
        pybuda.pybuda_reset()
    with torch.no_grad():
        assert calculate_pcc(model(x, mask), out) >= 0.99


class Lookup(torch.nn.Module):
    def __init__(self, vocab: int):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, 32)
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, ids):
        return self.proj(self.emb(ids))


def test_an_embedding_of_pushed_ids_is_device_work_once_out_of_cpu_fallback_ops():
    # Its int64 ids used to be refused ("'embedding' reads int64 operand"), so removing embedding from
    # cpu_fallback_ops still left it on the CPU of a TTDevice; the device's one-hot embedding takes them.
    config = pybuda.CompilerConfig(cpu_fallback_ops=[])
    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(0))
    assert capture(Lookup(1000).eval(), (ids,), config=config, for_device=True).report.fallback_ops == []
    # beyond 2,048 rows too (a chunked lookup: tests/frontend/test_device_lookups.py)
    assert capture(Lookup(3000).eval(), (ids,), config=config, for_device=True).report.fallback_ops == []


class PaddingAwarePositions(torch.nn.Module):
    """RoBERTa's position ids: ``cumsum(ids != pad) * mask + pad``, in [pad, pad + seq] whatever the ids."""

    def __init__(self, rows: int, pad: int = 1):
        super().__init__()
        self.pad = pad
        self.emb = torch.nn.Embedding(rows, 8, padding_idx=pad)

    def forward(self, ids, h):
        mask = ids.ne(self.pad).int()
        positions = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.pad
        return h + self.emb(positions), positions


def test_an_embedding_of_ids_provably_within_its_table_runs_on_the_device():
    ids = torch.randint(2, 50, (1, 16), generator=torch.Generator().manual_seed(0))
    ids[:, -4:] = 1
    h = torch.randn(1, 16, 8)
    config = pybuda.CompilerConfig(cpu_fallback_ops=[])
    # 18 rows hold positions 1..17: provably in range. 17 rows would not (position 17 is possible).
    (op,) = capture(PaddingAwarePositions(17).eval(), (ids, h), config=config, for_device=True).report.fallback_ops
    assert "not provably within the table's 17 rows" in op.reason
    module = PaddingAwarePositions(18).eval()
    assert capture(module, (ids, h), config=config, for_device=True).report.fallback_ops == []
    pybuda.set_configuration_options(cpu_fallback_ops=[], default_df_override=pybuda.DataFormat.Float32)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("pos", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = [t.value() for t in pybuda.run_inference(inputs=[(ids, h)]).get(timeout=300)]
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    want = module(ids, h)
    assert torch.equal(got[1], want[1])  # the positions, computed on the device, exact
    assert calculate_pcc(got[0], want[0]) >= 0.999 and torch.allclose(got[0], want[0], atol=1e-2)


def test_boolean_masks_pass_through_a_nop_on_the_device():
    from pybuda.ir.graph import Graph
    from pybuda.passes.lower.capabilities import unsupported_reason

    graph = Graph("mask")
    mask = graph.add_input("mask", (1, 32), torch.bool)
    nop = graph.add_op("copy", "nop", [mask.name])
    assert unsupported_reason(graph, nop) is None
