"""PYBUDA_N300_DATA_PARALLEL: both chips of an n300 run the same compiled netlist, each on half of every
microbatch. Numerics are one chip's; the placement and netlist are replicated onto chip 1; the performance
model shows about twice the throughput of one chip when the model is bound by compute."""

import pytest
import torch

import pybuda
from pybuda.errors import ConfigError, InputError


class Mlp(pybuda.PyBudaModule):
    """64 -> 1024 -> (layers x 1024) -> 64 with GELUs: plenty of math per input byte (compute bound)."""

    def __init__(self, name, layers=2):
        super().__init__(name)
        g = torch.Generator().manual_seed(0)
        self.w_in = pybuda.Parameter((torch.rand(64, 1024, generator=g) - 0.5) / 8, requires_grad=False)
        self.ws = [pybuda.Parameter((torch.rand(1024, 1024, generator=g) - 0.5) / 32, requires_grad=False)
                   for _ in range(layers)]
        self.w_out = pybuda.Parameter((torch.rand(1024, 64, generator=g) - 0.5) / 32, requires_grad=False)

    def forward(self, x):
        h = pybuda.op.Matmul("mm_in", x, self.w_in)
        for i, w in enumerate(self.ws):
            h = pybuda.op.Gelu(f"g{i}", pybuda.op.Matmul(f"mm{i}", h, w))
        return pybuda.op.Matmul("mm_out", h, self.w_out)


def _device(monkeypatch, data_parallel, layers=2, device_config=None):
    pybuda.pybuda_reset()
    if data_parallel:
        monkeypatch.setenv("PYBUDA_N300_DATA_PARALLEL", "1")
    else:
        monkeypatch.delenv("PYBUDA_N300_DATA_PARALLEL", raising=False)
    pybuda.set_configuration_options(device_config=device_config or ("wh_n300" if data_parallel else "wh_n150"),
                                     math_fidelity=pybuda.MathFidelity.HiFi4)
    return pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, arch=pybuda.BackendDevice.Wormhole_B0,
                           module=Mlp("m", layers))


X = torch.rand(4, 32, 64, generator=torch.Generator().manual_seed(3))


def test_outputs_equal_one_chip_and_the_netlist_is_replicated(monkeypatch):
    _device(monkeypatch, False)
    single = pybuda.run_inference(inputs=[(X,), (2 * X,)], input_count=2)
    single = [single.get(timeout=120)[0].value() for _ in range(2)]
    tt = _device(monkeypatch, True)
    q = pybuda.run_inference(inputs=[(X,), (2 * X,)], input_count=2)
    for want in single:
        got = q.get(timeout=120)[0].value()
        assert got.shape == want.shape == (4, 32, 64)
        assert torch.equal(got, want)
    (results,) = tt.get_compiled_results()
    assert results.microbatch == 2  # compiled once, for half of the microbatch
    chip0, chip1 = results.notes["data_parallel"]
    assert (chip0.chip_id, chip1.chip_id) == (0, 1)
    for name, p0 in chip0.placer_solution.op_placements.items():
        p1 = chip1.placer_solution.op_placements[name]
        assert (p0.chip_id, p1.chip_id) == (0, 1)
        assert (p0.grid_loc, p0.grid_size, p0.global_epoch) == (p1.grid_loc, p1.grid_size, p1.global_epoch)
    assert {g.target_device for g in chip0.netlist.graphs.values()} == {0}
    assert {g.target_device for g in chip1.netlist.graphs.values()} == {1}
    assert set(chip1.netlist.queues) == set(chip0.netlist.queues)
    assert all(q.target_device == 1 for q in chip1.netlist.queues.values())
    for name, op in chip0.netlist.graphs["fwd_0"].ops.items():
        assert chip1.netlist.graphs["fwd_0"].ops[name].grid_loc == op.grid_loc


def test_compute_bound_model_runs_about_twice_as_fast(monkeypatch):
    sample = (torch.rand(256, 32, 64),)
    tt = _device(monkeypatch, False, layers=4)
    pybuda.initialize_pipeline(training=False, sample_inputs=sample)  # compile only
    (one_chip,) = tt.inference_performance()
    tt = _device(monkeypatch, True, layers=4)
    pybuda.initialize_pipeline(training=False, sample_inputs=sample)
    (n300,) = tt.inference_performance()
    assert one_chip.limited_by == "device" and n300.limited_by == "device"
    assert (n300.chips, n300.microbatch) == (2, 256)
    assert 1.8 < n300.samples_per_sec / one_chip.samples_per_sec <= 2.05


def test_needs_an_n300_and_an_even_microbatch(monkeypatch):
    _device(monkeypatch, True, device_config="wh_n150")
    with pytest.raises(ConfigError, match="n300"):
        pybuda.initialize_pipeline(training=False, sample_inputs=(X,))
    _device(monkeypatch, True)
    with pytest.raises(InputError, match="even"):
        pybuda.initialize_pipeline(training=False, sample_inputs=(X[:3],))


def test_device_image_refuses_data_parallel(monkeypatch, tmp_path):
    tt = _device(monkeypatch, True)
    with pytest.raises(pybuda.errors.PybudaError, match="data parallel"):
        tt.compile_to_image(img_path=str(tmp_path / "dp.tti"), sample_inputs=(X,))


def test_training_refuses_data_parallel(monkeypatch):
    _device(monkeypatch, True)
    with pytest.raises(ConfigError, match="PYBUDA_N300_DATA_PARALLEL.*training"):
        pybuda.initialize_pipeline(training=True, sample_inputs=(X,))
