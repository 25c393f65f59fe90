"""The device-image command line: ``pybuda image info|run`` and ``pybuda benchmark --save_tti|--load_tti``."""

import json

import torch

import pybuda
from pybuda.cli import main as cli
from pybuda.perf.model import estimate_compiled


class Block(pybuda.PyBudaModule):
    def __init__(self, name="block"):
        super().__init__(name)
        self.w = pybuda.Parameter(torch.randn(40, 48, generator=torch.Generator().manual_seed(1)) * 0.1,
                                  requires_grad=False)

    def forward(self, x):
        return pybuda.op.Gelu("gelu", pybuda.op.Matmul("mm", x, self.w))


def test_image_info_and_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path / "build"))
    path = str(tmp_path / "block.tti")
    pybuda.set_configuration_options(device_config="wh_n150")
    device = pybuda.TTDevice("tt0", arch=pybuda.BackendDevice.Wormhole_B0, module=Block())
    pybuda.initialize_pipeline(training=False, sample_inputs=(torch.randn(2, 24, 40),))
    compiled = estimate_compiled(device.get_compiled_results()[0])
    pybuda.shutdown()
    pybuda.pybuda_reset()
    pybuda.set_configuration_options(device_config="wh_n150")
    device = pybuda.TTDevice("tt0", arch=pybuda.BackendDevice.Wormhole_B0, module=Block())
    device.compile_to_image(img_path=path, sample_inputs=(torch.randn(2, 24, 40),))
    pybuda.pybuda_reset()
    capsys.readouterr()

    assert cli.main(["image", "info", path]) == 0
    out = capsys.readouterr().out
    assert "card: wh_n150" in out and "ordered input shapes: [[2, 24, 40]]" in out and "modules: ['block']" in out

    assert cli.main(["image", "run", path, "--loop_count", "2"]) == 0
    out = capsys.readouterr().out
    assert "output 0: [2, 24, 48] float32" in out
    # The image is modelled exactly as the compile that wrote it (same netlist, same temporal epochs).
    assert f"{compiled.samples_per_sec:,.1f} samples/s" in out
    html = (tmp_path / "build" / "perf_report_block.html").read_text()
    assert "<svg class=\"routes\"" in html and "<polyline" in html


def test_image_commands_report_bad_images(tmp_path, capsys):
    bad = tmp_path / "bad.tti"
    bad.write_bytes(b"not an image")
    assert cli.main(["image", "info", str(bad)]) == 2
    assert "not a device image" in capsys.readouterr().err
    assert cli.main(["image", "run", str(tmp_path / "missing.tti")]) == 2
    assert "no device image" in capsys.readouterr().err


def test_benchmark_save_then_load_tti(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path / "build"))
    path = str(tmp_path / "bert_tiny.tti")
    common = ["benchmark", "-m", "bert", "-c", "tiny", "-mb", "2", "--loop_count", "2", "--device-config", "gs_e150",
              "--save_output", "--output-dir"]
    assert cli.main(common + [str(tmp_path / "save"), "--save_tti", path]) == 0
    out = capsys.readouterr().out
    assert "nothing ran (offline compile)" in out
    saved = json.loads(next((tmp_path / "save").glob("*.json")).read_text())
    assert saved["image_bytes"] > 0 and saved["host_samples_per_sec"] is None and saved["epochs"] >= 1

    assert cli.main(common + [str(tmp_path / "load"), "--load_tti", path]) == 0
    out = capsys.readouterr().out
    assert "loaded and ready" in out
    loaded = json.loads(next((tmp_path / "load").glob("*.json")).read_text())
    assert loaded["host_samples_per_sec"] > 0 and loaded["microbatch"] == 2
    assert loaded["modeled_samples_per_sec"] == saved["modeled_samples_per_sec"]
    assert loaded["epochs"] == saved["epochs"]

    assert cli.main(common + [str(tmp_path / "x"), "--load_tti", path, "--save_tti", path]) == 2
    assert "exclude each other" in capsys.readouterr().err
