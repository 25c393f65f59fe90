"""Device images: compile to an image, load it in a fresh process that cannot import the model, and get the
very same outputs as the in-process run; offline targeting; the image's fields and accessors."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file, save_file

import pybuda
from pybuda.errors import ConfigError, ImageError, InputError
from pybuda.op import nn as opnn

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _param(shape, seed, scale=0.1):
    g = torch.Generator().manual_seed(seed)
    return pybuda.Parameter(torch.randn(*shape, generator=g) * scale, requires_grad=False)


class TinyBlock(pybuda.PyBudaModule):
    """matmul + bias + gelu + softmax + layernorm on an unaligned shape; defined here only, so a fresh
    process that cannot import this file cannot rebuild it."""

    def __init__(self, name="tiny_block"):
        super().__init__(name)
        self.w = _param((40, 72), 1)
        self.b = _param((72,), 2)
        self.ln_w = _param((72,), 3, 1.0)
        self.ln_b = _param((72,), 4)

    def forward(self, x):
        h = pybuda.op.Gelu("gelu", pybuda.op.Matmul("fc", x, self.w, bias=self.b))
        h = opnn.Softmax("sm", h, dim=-1)
        return opnn.Layernorm("ln", h, self.ln_w, self.ln_b)


class Tail(pybuda.PyBudaModule):
    def __init__(self, name="tail"):
        super().__init__(name)
        self.w = _param((72, 16), 5)

    def forward(self, x):
        return pybuda.op.Relu("relu", pybuda.op.Matmul("proj", x, self.w))


# The child process refuses to import the test package, the model zoo, transformers and the compiler: the
# image must run from its data alone.
CHILD = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = ("tests", "transformers", "pybuda.models", "pybuda.passes", "pybuda.balancer", "pybuda.placer",
               "pybuda.compile")
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ImportError("blocked in the image-loading process: " + name)
            return None
    sys.meta_path.insert(0, Block())
    import pybuda
    from safetensors.torch import load_file, save_file
    img_path, inputs_path, out_path = sys.argv[1:4]
    image = pybuda.TTDeviceImage.load_from_disk(img_path)
    pybuda.TTDevice.load_image(img=image)
    saved = load_file(inputs_path)
    inputs = tuple(saved[f"in{i}"] for i in range(len(saved)))
    outputs = pybuda.run_inference(inputs=[inputs]).get()
    save_file({f"out{i}": o.value().contiguous() for i, o in enumerate(outputs)}, out_path)
    pybuda.shutdown()
    leaked = [b for b in BLOCKED if b in sys.modules]
    assert not leaked, leaked
""")


def run_in_fresh_process(img_path, inputs, tmp_path):
    """Outputs of the image at ``img_path`` on ``inputs``, computed by a fresh Python process."""
    inputs_path, out_path = str(tmp_path / "inputs.safetensors"), str(tmp_path / "outputs.safetensors")
    save_file({f"in{i}": t.contiguous() for i, t in enumerate(inputs)}, inputs_path)
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(img_path), inputs_path, out_path], cwd=str(tmp_path),
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = load_file(out_path)
    return [out[f"out{i}"] for i in range(len(out))]


def _in_process(modules, inputs, **device_kw):
    device = pybuda.TTDevice("tt0", **device_kw)
    device.place_module(modules)
    outputs = [o.value() for o in pybuda.run_inference(inputs=[tuple(inputs)]).get()]
    pybuda.shutdown()
    pybuda.pybuda_reset()
    return outputs


def test_pybuda_modules_round_trip_bit_identical_in_a_fresh_process(tmp_path):
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Bfp8_b)
    x = torch.randn(2, 24, 40)
    expected = _in_process([TinyBlock(), Tail()], [x], arch=pybuda.BackendDevice.Wormhole_B0)

    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Bfp8_b)
    device = pybuda.TTDevice("tt0", arch=pybuda.BackendDevice.Wormhole_B0, module=[TinyBlock(), Tail()])
    image = device.compile_to_image(img_path=str(tmp_path / "tiny.tti"), sample_inputs=(x,))
    assert image.modules == ["tiny_block", "tail"]
    assert image.get_input_shapes() == [(2, 24, 40)] and image.get_output_shapes() == [(2, 24, 16)]
    assert image.microbatch_size == 2 and image.arch == pybuda.BackendDevice.Wormhole_B0

    got = run_in_fresh_process(tmp_path / "tiny.tti", [x], tmp_path)
    assert len(got) == len(expected) == 1
    assert torch.equal(got[0], expected[0])


def test_loaded_image_runs_in_process_and_checks_pushes(tmp_path):
    x = torch.randn(1, 24, 40)
    device = pybuda.TTDevice("tt0", module=TinyBlock())
    device.compile_to_image(img_path=str(tmp_path / "t.tti"), sample_inputs=(x,))
    pybuda.pybuda_reset()
    reference = _in_process([TinyBlock()], [x])

    image = pybuda.TTDeviceImage.load_from_disk(str(tmp_path / "t.tti"))
    loaded = pybuda.TTDevice.load_image(img=image)
    assert loaded.arch == pybuda.BackendDevice.Grayskull
    # The image cannot recompile: another shape, dtype or count is refused where it is pushed.
    with pytest.raises(InputError, match="compiled for"):
        loaded.push_to_inputs(torch.randn(2, 24, 40))
    with pytest.raises(InputError, match="dtype"):
        loaded.push_to_inputs(torch.randn(1, 24, 40, dtype=torch.float64))
    with pytest.raises(InputError, match="takes 1 input"):
        loaded.push_to_inputs(x, x)
    out = pybuda.run_inference(inputs=[(x,)]).get()[0].value()
    assert torch.equal(out, reference[0])


def test_info_and_fields(tmp_path, capsys):
    pybuda.set_configuration_options(device_config="gs_e75")
    device = pybuda.TTDevice("tt_info", arch=pybuda.BackendDevice.Grayskull, devtype=pybuda.BackendType.Silicon,
                             module=TinyBlock())
    device.compile_to_image(img_path=str(tmp_path / "i.tti"), sample_inputs=(torch.randn(4, 24, 40),))
    image = pybuda.TTDeviceImage.load_from_disk(str(tmp_path / "i.tti"))
    text = image.info()
    assert "tt_info" in capsys.readouterr().out
    # gs_e75 harvests NoC rows 5 and 7: TT-Buda's bitmask form is 2**5 + 2**7.
    assert image.harvested_rows == 2 ** 5 + 2 ** 7 and "NoC rows [5, 7]" in text
    assert image.grid_size == [8, 12] and image.device.name == "gs_e75"
    assert image.devtype == pybuda.BackendType.Silicon and image.chip_ids == [0]
    assert image.microbatch_size == 4 and not image.is_compiled_for_training()
    assert image.get_target_shapes() == [] and image.version == pybuda.tti.IMAGE_VERSION
    assert image.module_name_to_metadata["tiny_block"]["class"] == "TinyBlock"
    assert image.compiler_cfg["device_config"] == "gs_e75"


def test_offline_compile_for_grayskull_on_a_wormhole_run(tmp_path, monkeypatch):
    """An image for gs_e150 built while the run is configured for Wormhole loads and runs; loading it onto a
    Wormhole device is an ImageError."""
    monkeypatch.setenv("GOLDEN_WORMHOLE_B0", "1")
    pybuda.set_configuration_options(device_config="gs_e150")
    x = torch.randn(1, 24, 40)
    device = pybuda.TTDevice("tt0", arch=pybuda.BackendDevice.Grayskull, module=TinyBlock())
    device.compile_to_image(img_path=str(tmp_path / "gs.tti"), sample_inputs=(x,))
    pybuda.pybuda_reset()

    image = pybuda.TTDeviceImage.load_from_disk(str(tmp_path / "gs.tti"))
    assert image.arch == pybuda.BackendDevice.Grayskull and image.device.name == "gs_e150"
    assert pybuda.TTDevice("wh").arch == pybuda.BackendDevice.Wormhole_B0  # the run's default arch
    pybuda.pybuda_reset()
    wormhole = pybuda.TTDevice("wh", arch=pybuda.BackendDevice.Wormhole_B0)
    with pytest.raises(ImageError, match="grayskull.*wormhole|Grayskull.*Wormhole|compiled for"):
        wormhole.load_image(img=image)
    pybuda.pybuda_reset()
    pybuda.TTDevice.load_image(img=image)
    out = pybuda.run_inference(inputs=[(x,)]).get()[0].value()
    assert out.shape == (1, 24, 72) and torch.isfinite(out).all()


def test_compile_for_a_descriptor_file(tmp_path):
    from pybuda.arch import get_device_descriptor
    from pybuda.backend_build.descriptors import device_desc_yaml

    desc = get_device_descriptor(device_config="wh_n150", harvesting_mask=0b101)
    path = tmp_path / "my_card.yaml"
    path.write_text(device_desc_yaml(desc))
    pybuda.set_configuration_options(backend_device_descriptor_path=str(path))
    device = pybuda.TTDevice("tt0", arch=pybuda.BackendDevice.Wormhole_B0, module=TinyBlock())
    image = device.compile_to_image(img_path=str(tmp_path / "f.tti"), sample_inputs=(torch.randn(1, 24, 40),))
    assert image.device.harvesting_mask == 0b101 and image.grid_size == [desc.grid_rows, desc.grid_cols]
    loaded = pybuda.TTDeviceImage.load_from_disk(str(tmp_path / "f.tti"))
    assert loaded.device == image.device


def test_descriptor_file_that_is_missing_or_of_another_arch(tmp_path):
    from pybuda.arch import get_device_descriptor
    from pybuda.backend_build.descriptors import device_desc_yaml

    # A missing file is refused where it is set.
    with pytest.raises(ConfigError, match="nowhere.yaml"):
        pybuda.set_configuration_options(backend_device_descriptor_path=str(tmp_path / "nowhere.yaml"))
    path = tmp_path / "gs.yaml"
    path.write_text(device_desc_yaml(get_device_descriptor(device_config="gs_e150")))
    pybuda.set_configuration_options(backend_device_descriptor_path=str(path))
    device = pybuda.TTDevice("tt0", arch=pybuda.BackendDevice.Wormhole_B0, module=TinyBlock())
    with pytest.raises(ConfigError, match="grayskull|Grayskull"):
        device.compile_to_image(img_path=str(tmp_path / "x.tti"), sample_inputs=(torch.randn(1, 24, 40),))


def test_load_image_arguments(tmp_path):
    with pytest.raises(ImageError, match="exactly one"):
        pybuda.TTDevice.load_image()
    with pytest.raises(ImageError, match="no device image"):
        pybuda.TTDevice.load_image(img_path=str(tmp_path / "missing.tti"))
    with pytest.raises(ImageError, match="TTDeviceImage"):
        pybuda.TTDevice.load_image(img="not an image")


def test_device_id_overrides(tmp_path):
    device = pybuda.TTDevice("tt0", module=TinyBlock())
    device.compile_to_image(img_path=str(tmp_path / "t.tti"), sample_inputs=(torch.randn(1, 24, 40),))
    assert pybuda.TTDeviceImage.load_from_disk(str(tmp_path / "t.tti"), device_id_overrides=[3]).chip_ids == [3]
    with pytest.raises(ImageError, match="device_id_overrides"):
        pybuda.TTDeviceImage.load_from_disk(str(tmp_path / "t.tti"), device_id_overrides=[0, 1])


def test_default_image_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    device = pybuda.TTDevice("tt/../evil", module=TinyBlock())
    device.compile_to_image(sample_inputs=(torch.randn(1, 24, 40),))
    files = os.listdir(tmp_path / "device_images")
    assert files == ["tt_.._evil.tti"]


def test_training_images_are_refused_clearly(tmp_path):
    device = pybuda.TTDevice("tt0", module=TinyBlock())
    with pytest.raises(pybuda.errors.PybudaError, match="training"):
        device.compile_to_image(img_path=str(tmp_path / "t.tti"), training=True,
                                sample_inputs=(torch.randn(1, 24, 40),))


@pytest.mark.slow
def test_bert_base_pytorch_round_trip_in_a_fresh_process(tmp_path):
    """BERT-base as a PyTorchModule (its embedding runs in a CPU pre stage, stored as data): the fresh process
    imports neither transformers nor the model zoo, and its outputs are bit-identical."""
    from pybuda.models import get_model

    spec = get_model("bert", "base", microbatch=1, seq_len=128, task="text_classification")
    inputs = [t for t in spec.example_inputs]
    expected = _in_process([spec.to_pybuda()], inputs)

    device = pybuda.TTDevice("tt0", module=spec.to_pybuda())
    image = device.compile_to_image(img_path=str(tmp_path / "bert.tti"), sample_inputs=tuple(inputs))
    assert image.cpu_pre is not None  # the embedding lookup falls back to the CPU and travels as data
    got = run_in_fresh_process(tmp_path / "bert.tti", inputs, tmp_path)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert torch.equal(g, e)


def test_harvested_rows_as_in_the_seed_example(tmp_path):
    """Seed 002: harvesting NoC rows 1 and 11 of a Grayskull gives an [8, 12] grid and 'harvested rows: 2050'."""
    pybuda.set_configuration_options(harvested_rows=[1, 11])
    device = pybuda.TTDevice("tt0", arch=pybuda.BackendDevice.Grayskull, devtype=pybuda.BackendType.Silicon,
                             module=TinyBlock())
    device.compile_to_image(img_path=str(tmp_path / "h.tti"), sample_inputs=(torch.randn(1, 24, 40),))
    image = pybuda.TTDeviceImage.load_from_disk(str(tmp_path / "h.tti"))
    assert image.grid_size == [8, 12] and image.harvested_rows == 2050
    assert "harvested rows: 2050" in image.info()
    # The placement stays off the harvested rows: every op lies inside the 8-row grid.
    for graph in image.stages[0].netlist.graphs.values():
        for op in graph.ops.values():
            assert op.grid_loc[0] + op.grid_size[0] <= 8


def test_loaded_image_runs_in_device_processes(tmp_path, monkeypatch):
    """TT-Buda's default concurrent mode: the loaded device (and its image) travels to a device process."""
    x = torch.randn(1, 24, 40)
    device = pybuda.TTDevice("tt0", module=TinyBlock())
    device.compile_to_image(img_path=str(tmp_path / "t.tti"), sample_inputs=(x,))
    pybuda.pybuda_reset()
    expected = _in_process([TinyBlock()], [x])
    monkeypatch.delenv("PYBUDA_FORCE_SEQUENTIAL", raising=False)
    monkeypatch.setenv("PYBUDA_FORCE_CONCURRENT", "1")
    pybuda.TTDevice.load_image(img_path=str(tmp_path / "t.tti"))
    out = pybuda.run_inference(inputs=[(x,), (x,)])
    assert torch.equal(out.get(timeout=120)[0].value(), expected[0])
    assert torch.equal(out.get(timeout=120)[0].value(), expected[0])
