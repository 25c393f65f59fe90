"""CPU fallback: unsupported ops split the model into [CPU pre, device graph, CPU post] (TT-Buda §1.6)."""

import pathlib

import pytest
import torch
from torch import nn

from pybuda.config import CompilerConfig
from pybuda.errors import CompileError, UnsupportedOpError
from pybuda.frontend.torch import capture, split_for_devices
from pybuda.verify import calculate_pcc, run_graph_on_cpu

THIS_FILE = pathlib.Path(__file__).resolve()


def line_of(marker: str) -> int:
    """Line number of the source line carrying ``# <marker>`` in this file."""
    for i, line in enumerate(THIS_FILE.read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# <{marker}>"):
            return i
    raise AssertionError(f"marker {marker} not found")


@torch.library.custom_op("pybuda_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    """A custom op pybuda knows nothing about."""
    return x * 3 - 1


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


class BesselFirst(nn.Module):
    """An unmapped op right after the input, another right before the output."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        y = torch.special.i0(x)  # <i0>
        y = torch.relu(self.a(y))
        z = self.b(y).softmax(-1)
        return torch.special.i1(z), y  # <i1>


class MiddleOp(nn.Module):
    """A custom op deep in the model: the smaller side (here the tail) moves to the CPU."""

    def __init__(self):
        super().__init__()
        self.head = nn.Sequential(*[nn.Linear(8, 8) for _ in range(4)])
        self.tail = nn.Sequential(nn.Linear(8, 8), nn.Tanh())

    def forward(self, x):
        return self.tail(mystery(self.head(x)))  # <mystery>


def x_input():
    return torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0))


def test_pre_and_post_stages_run_end_to_end(fe):
    model = BesselFirst().eval()
    x = x_input()
    result = capture(model, (x,))
    report = result.report
    assert report.op_names() == ["aten.i0.default", "aten.special_i1.default"]
    i0_op, i1_op = report.fallback_ops
    assert (i0_op.side, i1_op.side) == ("pre", "post")
    assert i0_op.location == f"{THIS_FILE}:{line_of('i0')}"
    assert i1_op.location == f"{THIS_FILE}:{line_of('i1')}"
    assert "torch.special.i0" in i0_op.code
    text = str(report)
    assert "aten.i0.default" in text and "CPU pre" in text and "CPU post" in text
    assert {"i0", "special_i1"}.isdisjoint({n.op_type for n in result.graph.ops})
    assert isinstance(result.pre, torch.fx.GraphModule) and isinstance(result.post, torch.fx.GraphModule)
    fe.matches(result.run(x), fe.torch_outputs(model, (x,)))


def test_split_for_devices_contract(fe):
    """pre(*user_inputs) -> device inputs; device outputs -> post(*) -> model outputs."""
    model = BesselFirst().eval()
    x = x_input()
    pre, graph, post = split_for_devices(model, (x,))
    device_in = pre(x)
    assert isinstance(device_in, tuple)
    assert [tuple(t.shape) for t in device_in] == [n.shape for n in graph.inputs]
    device_out = run_graph_on_cpu(graph, list(device_in))
    assert len(device_out) == len(graph.outputs)
    final = post(*device_out)
    fe.matches(list(final), fe.torch_outputs(model, (x,)))
    # y is a model output computed on the device but consumed by nobody on the CPU: it passes through post.
    assert len(final) == 2


def test_middle_op_falls_back_the_smaller_side(fe, caplog):
    model = MiddleOp().eval()
    x = x_input()
    with caplog.at_level("WARNING"):
        result = capture(model, (x,))
    (op,) = result.report.fallback_ops
    assert op.aten_op == "pybuda_test.mystery.default" and op.side == "post"
    assert op.location == f"{THIS_FILE}:{line_of('mystery')}"
    assert op.moved_with > 0  # the tail moved with it
    assert result.pre is None and result.post is not None
    assert 0 < result.report.host_fraction < 0.5
    fe.matches(result.run(x), fe.torch_outputs(model, (x,)))


def test_fallback_disabled_lists_every_unsupported_op_with_its_line():
    class ThreeBadOps(nn.Module):
        def forward(self, x):
            a = torch.special.i0(x)  # <bad1>
            b = mystery(a)  # <bad2>
            return torch.special.i1(b)  # <bad3>

    config = CompilerConfig()
    config.enable_tvm_cpu_fallback = False
    with pytest.raises(UnsupportedOpError) as info:
        capture(ThreeBadOps(), (x_input(),), config=config)
    ops = info.value.ops
    assert [o.framework_op for o in ops] == ["aten.i0.default", "pybuda_test.mystery.default", "aten.special_i1.default"]
    assert [o.location for o in ops] == [f"{THIS_FILE}:{line_of(m)}" for m in ("bad1", "bad2", "bad3")]
    message = str(info.value)
    assert "3 unsupported op(s)" in message and f"test_fallback.py:{line_of('bad2')}" in message


def test_cpu_fallback_ops_config_moves_an_op_type_to_the_cpu(fe):
    model = BesselFirst().eval()
    config = CompilerConfig()
    config.cpu_fallback_ops = ["embedding", "softmax"]
    x = x_input()
    result = capture(model, (x,), config=config)
    ops = {f.aten_op: f for f in result.report.fallback_ops}
    assert "aten.softmax.int" in ops
    assert "in cpu_fallback_ops" in ops["aten.softmax.int"].reason
    assert "softmax" not in {n.op_type for n in result.graph.ops}
    fe.matches(result.run(x), fe.torch_outputs(model, (x,)))


def test_embedding_is_a_default_fallback_op_and_parameters_are_shared():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(20, 8)
            self.proj = nn.Linear(8, 8)

        def forward(self, ids):
            h = self.proj(self.emb(ids))
            return h @ self.emb.weight.t()  # the embedding table is also used on the device

    model = Tied().eval()
    ids = torch.randint(0, 20, (2, 5))
    result = capture(model, (ids,))
    assert result.report.fallback_ops[0].side == "pre"
    assert result.report.shared_parameters == ["emb.weight"]
    assert result.pre.emb_weight is model.emb.weight  # the CPU stage holds the model's own parameter
    with torch.no_grad():
        assert torch.allclose(result.run(ids)[0], model(ids), atol=1e-5)


def test_model_output_that_is_an_input_passes_through():
    class Echo(nn.Module):
        def forward(self, x, y):
            return x, torch.special.i0(y)

    x, y = x_input(), x_input() + 1
    result = capture(Echo(), (x, y))
    out = result.run(x, y)
    assert torch.equal(out[0], x) and torch.equal(out[1], torch.special.i0(y))
    assert any(n.op_type == "nop" for n in result.graph.ops)


def test_integer_results_of_the_cpu_pass_through_the_device_exactly():
    # A model wholly on the CPU (mode) still passes its outputs through the device graph; the indices, integers
    # up to 999, came back rounded to bfloat16 (999 -> 1000) by a default-format output queue.
    import pybuda

    class Mode(nn.Module):
        def forward(self, x):
            return torch.mode(x, -1).indices

    x = torch.randn(1, 8, 1000, generator=torch.Generator().manual_seed(3))
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("mode", Mode()), arch=pybuda.BackendDevice.Wormhole_B0)
    try:
        got = pybuda.run_inference(inputs=[(x,)]).get(timeout=600)[0].value()
    finally:
        pybuda.shutdown()
    assert got.dtype == torch.int64 and torch.equal(got, Mode()(x))


@pytest.mark.parametrize("arch", ["Grayskull", "Wormhole_B0"])
def test_float_results_of_a_model_wholly_on_the_cpu_come_back_unrounded(arch):
    # A determinant has no device op, so the whole model runs on the CPU; its float result still passed through
    # default-format (Float16_b) device queues on the way out and came back rounded (93.958 -> 93.5). The host
    # now hands back what it pushed (QueueIO.copy_of): on Grayskull no device format would have kept it.
    import pybuda

    class Det(nn.Module):
        def forward(self, x):
            return torch.linalg.det(x)

    x = 3 * torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(5))
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("det", Det()), arch=getattr(pybuda.BackendDevice, arch))
    try:
        got = pybuda.run_inference(inputs=[(x,)]).get(timeout=600)[0].value()
    finally:
        pybuda.shutdown()
    assert torch.equal(got, Det()(x))


def test_grayskull_returns_cpu_integers_past_256_beside_device_outputs():
    # argmax over 300 columns of the input runs on the CPU (its indices pass what Grayskull keeps exact) and was
    # routed through the device to the outputs, whose push was then refused: "holds values from 19 to 290".
    import pybuda

    class LinearAndArgmax(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(300, 16)

        def forward(self, x):
            return self.fc(x), x.argmax(-1)

    torch.manual_seed(0)
    m = LinearAndArgmax().eval()
    x = torch.randn(1, 4, 300)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", m), arch=pybuda.BackendDevice.Grayskull)
    try:
        got = [t.value() for t in pybuda.run_inference(inputs=[(x,)]).get(timeout=600)]
    finally:
        pybuda.shutdown()
    want = m(x)
    assert torch.equal(got[1], want[1]) and calculate_pcc(got[0], want[0]) >= 0.99


def test_data_dependent_control_flow_is_a_clear_compile_error():
    class Branchy(nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # <branch>
                return x * 2
            return x

    with pytest.raises(CompileError) as info:
        capture(Branchy(), (x_input(),), graph_name="branchy")
    message = str(info.value)
    assert "model 'branchy' has data-dependent control flow" in message
    assert f"line {line_of('branch')}" in message and "if x.sum() > 0" in message
    assert info.value.stage == "GENERATE_INITIAL_GRAPH"


def test_a_branch_on_an_item_names_the_model_line():
    # Longformer: `is_global_attn = mask.flatten().any().item()` then `if is_global_attn:`; torch's guard error
    # names no line, the CompileError names the model's.
    class ItemBranch(nn.Module):
        def forward(self, x):
            flag = (x > 0).any().item()
            if flag:  # <item-branch>
                return x * 2
            return x

    with pytest.raises(CompileError) as info:
        capture(ItemBranch(), (x_input(),), graph_name="item_branch")
    message = str(info.value)
    assert "model 'item_branch' has data-dependent control flow" in message, message
    assert f" at {THIS_FILE}:{line_of('item-branch')} `if flag:" in message, message


def test_a_fallback_op_that_reads_no_input_is_folded_and_the_model_runs_batched(tmp_path):
    # A positional embedding looked up with constant positions (as Whisper's encoder does) computes the same
    # table for every sample. It stays in the device graph, where consteval folds it, instead of becoming a
    # CPU-pre output that the device would take as an unbatched input (which microbatch 2 cannot carry).
    import pybuda
    from pybuda.compile import pybuda_compile
    from pybuda.golden.executor import create_executor

    class Positional(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Embedding(32, 32)
            self.proj = nn.Linear(32, 32)

        def forward(self, x):
            return self.proj(x + self.pos(torch.arange(32)))

    model = Positional().eval()
    x = torch.randn(2, 32, 32, generator=torch.Generator().manual_seed(1))
    result = capture(model, (x,))
    assert not result.report.fallback_ops and result.pre is None
    cfg = CompilerConfig()
    cfg.backend_output_dir = str(tmp_path)
    results = pybuda_compile(pybuda.PyTorchModule("positional", model), "positional", x, compiler_cfg=cfg,
                             microbatch_size=2)
    # The device has no embedding op: the compile succeeding means consteval folded the lookup.
    (got,) = create_executor(results).run([x])
    with torch.no_grad():
        want = model(x)
    assert got.shape == want.shape and calculate_pcc(got, want) >= 0.999  # Float16_b activations: PCC, not 1e-5
    assert torch.allclose(got, want, rtol=0.02, atol=0.05)


@pytest.mark.parametrize("ids", [torch.arange(3, 19), torch.tensor([[5, 1, 9, 9, 0], [2, 2, 7, 3, 1]])],
                         ids=["positions", "scattered"])
def test_an_embedding_with_ids_known_at_capture_runs_on_the_device(ids, tmp_path):
    # Whisper's decoder looks its positions up with torch.arange: a constant gather of the table's rows (a
    # slice for a run of ids, a one-hot matmul otherwise), not a CPU stage reading int64 ids.
    import pybuda
    from pybuda.compile import pybuda_compile
    from pybuda.golden.executor import create_executor

    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Embedding(40, 32)
            self.proj = nn.Linear(32, 32)

        def forward(self, x):
            return self.proj(x + self.pos(ids).reshape(-1, 32)[:16])

    model = Lookup().eval()
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(2)) if ids.dim() == 1 else \
        torch.randn(2, 10, 32, generator=torch.Generator().manual_seed(2))
    result = capture(model, (x[:1],), for_device=True)
    assert not result.report.fallback_ops and result.pre is None
    cfg = CompilerConfig(backend_output_dir=str(tmp_path))
    results = pybuda_compile(pybuda.PyTorchModule("lookup", model), "lookup", x, compiler_cfg=cfg, microbatch_size=2)
    (got,) = create_executor(results).run([x])
    with torch.no_grad():
        want = model(x)
    assert calculate_pcc(got, want) >= 0.999 and torch.allclose(got, want, rtol=0.02, atol=0.05)


class ViewAfterFallback(nn.Module):
    """A view in the CPU post stage of a value that follows the layout of a device output."""

    def __init__(self):
        super().__init__()
        self.head = nn.Sequential(*[nn.Linear(8, 8) for _ in range(4)])

    def forward(self, x):
        return mystery(self.head(x)).view(6, 8)


def test_post_stage_views_take_device_outputs_of_any_layout():
    # The device hands its outputs over in layouts of its own; the traced run's views assumed its strides
    # (Funnel Transformer's post stage failed with "view size is not compatible with input tensor's size and
    # stride"). The stage reshapes instead: a view where the strides allow, else a copy.
    model = ViewAfterFallback().eval()
    x = x_input()
    pre, graph, post = split_for_devices(model, (x,))
    assert pre is None and post is not None  # the tail falls back: mystery and the view after it
    device_out = run_graph_on_cpu(graph, [x])
    transposed = [t.transpose(-1, -2).contiguous().transpose(-1, -2) for t in device_out]
    assert not transposed[0].is_contiguous()
    with torch.no_grad():
        want = model(x)
    assert torch.allclose(post(*transposed)[0], want, atol=1e-5)


class SequenceFirstOnTheCpu(nn.Module):
    def forward(self, x):  # x: [b, 12, 16]
        y = torch.atan(x.transpose(0, 1))  # no device op: a CPU stage whose output is [12, b, 16]
        return (y * 2 + 1).transpose(0, 1)


@pytest.mark.parametrize("samples", [1, 3])
def test_a_cpu_stage_output_whose_dim_0_is_not_the_batch_crosses_to_the_device(samples):
    # The runtime cuts pushes along dim 0; a sequence-first value from a CPU stage ([seq, 1, hidden], as an RNN
    # that falls back gives) was taken for 12 samples and failed to run ("cannot reshape 16 elements into
    # (1, 12, 16)"). It now crosses with a leading sample dim, which the device graph drops.
    import pybuda

    x = torch.randn(samples, 12, 16, generator=torch.Generator().manual_seed(0))
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("seq", SequenceFirstOnTheCpu()),
                    arch=pybuda.BackendDevice.Wormhole_B0)
    try:
        got = pybuda.run_inference(inputs=[(x,)]).get(timeout=600)[0].value()
    finally:
        pybuda.shutdown()
    want = SequenceFirstOnTheCpu()(x)
    assert got.shape == want.shape and calculate_pcc(got, want) >= 0.999
