"""The capture API: names, tags, inputs/outputs, constant folding, serialisation, the PyTorchModule hook."""

import pathlib

import pytest
import torch
from torch import nn

import pybuda
from pybuda.errors import CompileError
from pybuda.frontend.aten_map import mapped_aten_ops
from pybuda.frontend.torch import CaptureResult, capture
from pybuda.ir.graph import Graph
from pybuda.verify import run_graph_on_cpu

THIS_FILE = pathlib.Path(__file__).resolve()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.register_buffer("scale", torch.tensor([0.5]))

    def forward(self, hidden_states, mask=None):
        h = self.query(hidden_states) * self.scale  # <query>
        if mask is not None:
            h = h + mask
        return {"out": self.norm(h), "pair": (h.sum(-1), hidden_states)}


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, hidden_states, mask):
        out = self.blocks[0](hidden_states, mask)["out"]
        return self.blocks[1](out)


def inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 4, 8, generator=g), torch.randn(2, 1, 8, generator=g)


def test_names_tags_and_structure(fe):
    model = Outer().eval()
    x, mask = inputs()
    result = capture(model, (x, mask), graph_name="outer")
    assert isinstance(result, CaptureResult)
    graph = result.graph
    assert graph.name == "outer"
    assert [n.name for n in graph.inputs] == ["hidden_states", "mask"] == result.input_names
    assert {n.name for n in graph.parameters} == set(dict(model.named_parameters()))
    # The buffer multiply folded into nothing surprising: buffers are constants named after the buffer.
    assert {"blocks.0.scale", "blocks.1.scale"} <= {n.name for n in graph.constants}
    query = graph["linear"]
    assert query.op_type == "matmul"
    assert query.tags["source"] == f"{THIS_FILE}:{_line('query')}"
    assert query.tags["layer"] == "blocks.0.query"
    assert query.tags["aten"] == "aten.linear.default"
    # Outputs: dict/tuple structure is rebuilt from the flat outputs.
    flat = result.run(x, mask)
    assert len(flat) == len(graph.outputs) == 3
    out = result.unflatten_outputs(flat)
    with torch.no_grad():
        want = model(x, mask)
    assert set(out) == {"out", "pair"}
    fe.matches([out["out"], out["pair"][0], out["pair"][1]], [want["out"], want["pair"][0], want["pair"][1]])


def _line(marker):
    for i, line in enumerate(THIS_FILE.read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# <{marker}>"):
            return i
    raise AssertionError(marker)


def test_source_lines_without_torch_stack_traces():
    """Capture records each op's model line itself (torch's per-node stack traces are off while it runs,
    and back on after); a module written wholly in torch is located by its module path."""
    result = capture(Outer().eval(), inputs(), graph_name="outer")
    sources = {op.tags["source"] for op in result.graph.ops if op.tags.get("layer", "").endswith("query")}
    assert sources == {f"{THIS_FILE}:{_line('query')}"}
    assert torch.fx.config.do_not_emit_stack_traces is False
    plain = torch.export.export(Block().eval(), inputs(), strict=False)  # outside capture: torch's own traces
    traced = [n for n in plain.graph.nodes if n.op == "call_function" and n.meta.get("stack_trace")]
    assert traced and any(n.meta["stack_trace"].count("File ") > 1 for n in traced)  # not our one frame
    seq = capture(nn.Sequential(nn.Linear(8, 8)).eval(), (torch.randn(2, 8),), graph_name="seq")
    assert {op.tags["source"] for op in seq.graph.ops if op.op_type == "matmul"} == {"<0>"}


def test_keyword_sample_inputs():
    model = Block().eval()
    x, mask = inputs()
    result = capture(model, {"hidden_states": x, "mask": mask})
    assert result.input_names == ["hidden_states", "mask"]
    a = result.run(hidden_states=x, mask=mask)
    b = result.run(mask=mask, hidden_states=x)  # keyword order does not matter
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    with pytest.raises(pybuda.errors.InputError):
        result.run(x)


def test_pytorch_module_to_graph_and_graph_serialisation(tmp_path):
    model = Block().eval()
    x, mask = inputs()
    wrapped = pybuda.PyTorchModule("block", model)
    result = wrapped.to_graph(x, mask)
    assert result.graph.name == "block"
    result.graph.save(str(tmp_path / "block"))
    loaded = Graph.load(str(tmp_path / "block"))
    got = run_graph_on_cpu(loaded, [x, mask])
    want = run_graph_on_cpu(result.graph, [x, mask])
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_integer_inputs_and_unused_inputs_stay():
    class Gather(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.randn(10, 4))

        def forward(self, ids, unused):
            return self.table[ids] * 2

    model = Gather()
    ids = torch.tensor([[1, 2, 9]])
    result = capture(model, (ids, torch.zeros(3)))
    assert [(n.name, n.dtype) for n in result.graph.inputs] == [("ids", torch.int64), ("unused", torch.float32)]
    with torch.no_grad():
        assert torch.equal(result.run(ids, torch.zeros(3))[0], model(ids, None))


def test_export_failure_names_the_model():
    class Bad(nn.Module):
        def forward(self, x):
            return x.numpy()

    with pytest.raises(CompileError) as info:
        capture(Bad(), (torch.ones(2),), graph_name="bad_model")
    assert "bad_model" in str(info.value)


def test_zero_size_values_fold_away_and_the_model_runs_on_the_device():
    # A rotary split over the whole head (Phi-3's x[..., :d], x[..., d:] with d the head size) leaves an empty
    # "pass" half: known at capture time, dropped by the concatenation, not a CPU fallback feeding the
    # device a zero-size input (which crashed the DRAM placer).
    class PartialRotary(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(32, 32)

        def forward(self, x):
            h = self.lin(x)
            rot, keep = h[..., :32], h[..., 32:]
            return torch.cat([rot * 2.0, keep + 1.0], dim=-1)

    model = PartialRotary().eval()
    x = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(0))
    result = capture(model, (x,), for_device=True)
    assert result.pre is None and result.post is None, str(result.report)
    assert all(0 not in n.shape for n in result.graph.nodes.values())
    with torch.no_grad():
        assert torch.allclose(result.run(x)[0], model(x))


def test_an_empty_model_output_is_a_clear_error():
    class EmptyOut(nn.Module):
        def forward(self, x):
            return x * 2.0, x[..., 40:]

    with pytest.raises(CompileError, match=r"output 1 is empty \(shape \[1, 16, 0\]\)"):
        capture(EmptyOut(), (torch.randn(1, 16, 32),))


def test_capture_rejects_non_modules():
    with pytest.raises(CompileError):
        capture(lambda x: x, (torch.ones(1),))


def test_mapped_op_coverage():
    ops = set(mapped_aten_ops())
    must = {"linear", "addmm", "bmm", "matmul", "baddbmm", "permute", "view", "reshape", "slice", "select", "expand",
            "mean", "var", "native_layer_norm", "layer_norm", "_softmax", "softmax", "gelu", "convolution", "conv2d",
            "max_pool2d_with_indices", "adaptive_avg_pool2d", "hardtanh", "_native_batch_norm_legit_no_training",
            "embedding", "_to_copy", "masked_fill", "where", "cat", "split", "chunk", "unsqueeze", "squeeze", "t",
            "clone", "pow", "rsqrt", "neg", "div", "sub", "scaled_dot_product_attention", "index", "tril"}
    assert must <= ops, sorted(must - ops)
