"""Device images of models whose CPU fallback stage holds a library's custom op: the image stores the ATen ops
the op's implementation runs (the loader's allow-list is unchanged), loads in a fresh process that has never
registered the op, and gives the direct run's outputs bit for bit; an op that cannot be decomposed is refused
at save time, naming it and saying why."""

import importlib.util
import json
import pathlib

import pytest
import torch
from torch import nn

import pybuda
from pybuda.errors import ImageError
from pybuda.tti.archive import MANIFEST, read_archive, write_archive
from pybuda.tti.image import IMAGE_VERSION
from test_image_round_trip import _in_process, run_in_fresh_process


@torch.library.custom_op("pybuda_tti_test::gated_tanh", mutates_args=())
def gated_tanh(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Made of ATen ops, with a constant tensor of its own and a view: decomposable."""
    scale = torch.tensor([0.5, 2.0]).repeat(x.shape[-1] // 2)
    return torch.tanh(x * scale) * torch.sigmoid(gate.view(1, -1))


@gated_tanh.register_fake
def _(x, gate):
    return torch.empty_like(x)


@torch.library.custom_op("pybuda_tti_test::flip_negative_rows", mutates_args=())
def flip_negative_rows(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Loops over tensor values (the shape of Mixtral's grouped-matmul fallback): no fixed ATen graph."""
    out = x.clone()
    for i, negative in enumerate((x[..., 0] < 0).flatten().tolist()):
        if negative:
            out.view(-1, x.shape[-1])[i] *= -1
    return out


@flip_negative_rows.register_fake
def _(x, gate):
    return torch.empty_like(x)


class GatedHead(nn.Module):
    """linear-relu-linear on the device; the custom op and the linear after it in the CPU post stage."""

    def __init__(self, op=gated_tanh):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
        self.gate = nn.Parameter(torch.randn(16))
        self.head = nn.Linear(16, 8)
        self.op = op

    def forward(self, x):
        return self.head(self.op(self.body(x), self.gate))


def _compile(tmp_path, model, x):
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("gated", model))
    path = str(tmp_path / "gated.tti")
    image = device.compile_to_image(img_path=path, sample_inputs=(x,))
    stage = device.cpu_fallback_device_post.modules[0].fn
    pybuda.pybuda_reset()
    return path, image, stage


def _stored_targets(path):
    files = read_archive(path)
    graph = next(n for n in files if n.startswith("cpu_stages/") and n.endswith(".json"))
    data = json.loads(files[graph])
    return files, graph, [n["target"] for n in data["nodes"] if n["op"] == "call_function"]


def test_custom_op_stage_is_stored_as_aten_and_round_trips_bit_identical(tmp_path):
    x = torch.randn(2, 4, 16)
    path, image, stage = _compile(tmp_path, GatedHead().eval(), x)
    assert image.cpu_post is not None
    # The in-memory stage, which the direct run uses, keeps the op; the stored one holds ATen ops only.
    assert any(n.target is torch.ops.pybuda_tti_test.gated_tanh.default for n in stage.graph.nodes)
    _, _, targets = _stored_targets(path)
    assert "aten.tanh.default" in targets and "aten.sigmoid.default" in targets
    assert all(t.startswith("aten.") for t in targets), targets

    expected = _in_process([pybuda.PyTorchModule("gated", GatedHead().eval())], [x])
    # The child refuses to import the tests, so it never registers the op: the image runs from its data alone.
    got = run_in_fresh_process(path, [x], tmp_path)
    assert len(got) == len(expected) == 1 and got[0].shape == (2, 4, 8)
    assert torch.equal(got[0], expected[0])


def test_a_stored_custom_op_name_is_refused_at_load(tmp_path):
    """The loader's allow-list is unchanged: an image naming the op (even one registered here) is refused."""
    path, _, _ = _compile(tmp_path, GatedHead().eval(), torch.randn(1, 4, 16))
    files, graph, _ = _stored_targets(path)
    files.pop(MANIFEST)
    files[graph] = files[graph].replace(b'"aten.tanh.default"', b'"pybuda_tti_test.gated_tanh.default"')
    write_archive(tmp_path / "tampered.tti", files, IMAGE_VERSION)
    with pytest.raises(ImageError, match=r"'pybuda_tti_test.gated_tanh.default' is not an allowed op name"):
        pybuda.TTDeviceImage.load_from_disk(str(tmp_path / "tampered.tti")).cpu_post.function()


def test_a_custom_op_that_cannot_be_decomposed_is_refused_naming_it(tmp_path):
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("gated", GatedHead(flip_negative_rows).eval()))
    with pytest.raises(ImageError, match=r"pybuda_tti_test.flip_negative_rows.default\): op is not in the "
                                         r"allow-list .* cannot be decomposed .*depends on the values"):
        device.compile_to_image(img_path=str(tmp_path / "flip.tti"), sample_inputs=(torch.randn(1, 4, 16),))


def _mixtral(experts_implementation=None):
    """The HF sweep's tiny Mixtral (random weights) and its inputs."""
    pytest.importorskip("transformers")
    tool = pathlib.Path(__file__).resolve().parents[2] / "tools" / "hf_model_sweep.py"
    spec = importlib.util.spec_from_file_location("hf_model_sweep", tool)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    module, inputs = sweep.build("mixtral")
    if experts_implementation:
        module.model.config._experts_implementation = experts_implementation
    return pybuda.PyTorchModule("mixtral", module), inputs


@pytest.mark.slow
def test_mixtral_grouped_matmul_fallback_is_refused_with_the_reason(tmp_path):
    """Hugging Face Mixtral runs its experts through ``transformers::grouped_mm_fallback`` under torch.export, a
    Python loop over the routed token counts: a graph traced from it would hold one sample's routing."""
    module, inputs = _mixtral()
    device = pybuda.TTDevice("tt0", module=module)
    with pytest.raises(ImageError, match=r"transformers.grouped_mm_fallback.default\): .*depends on the values"):
        device.compile_to_image(img_path=str(tmp_path / "mixtral.tti"), sample_inputs=inputs)


@pytest.mark.slow
def test_mixtral_with_batched_experts_round_trips_bit_identical(tmp_path):
    """With transformers' ``batched_mm`` experts (gathers and bmm, no loop over values) Mixtral's CPU stages hold
    ATen ops only: its image saves, and a fresh process gives the direct run's logits bit for bit."""
    module, inputs = _mixtral("batched_mm")
    device = pybuda.TTDevice("tt0", module=module)
    device.compile_to_image(img_path=str(tmp_path / "mixtral.tti"), sample_inputs=inputs)
    pybuda.pybuda_reset()
    expected = _in_process([_mixtral("batched_mm")[0]], list(inputs))
    got = run_in_fresh_process(tmp_path / "mixtral.tti", list(inputs), tmp_path)
    assert len(got) == len(expected) == 1 and torch.equal(got[0], expected[0])
