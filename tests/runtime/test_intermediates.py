"""Intermediates: ``op_intermediates_to_save`` and ``PyBudaModule.insert_tapout_queue_for_op`` save a tapped
op's output on every inference, compiled into the netlist as an extra output queue, and the runtime routes
it to ``pybuda.get_intermediates_queue()`` instead of the output queue."""

import pytest
import torch

import pybuda
from pybuda.errors import ConfigError, ModuleError, PybudaError

ATOL = 0.05  # bfloat16 activations on the simulated chip


class Chain(pybuda.PyBudaModule):
    """x @ w -> relu -> exp, with w = ones so that mm is the row sum of x."""

    def __init__(self, name):
        super().__init__(name)
        self.w = pybuda.Parameter(torch.ones(32, 32), requires_grad=False)

    def forward(self, x):
        mm = pybuda.op.Matmul("mm", x, self.w)
        return pybuda.op.Exp("exp", pybuda.op.Relu("relu", mm))


def _inputs(n):
    g = torch.Generator().manual_seed(0)
    return [(torch.rand(1, 32, 32, generator=g) - 0.5) / 8 for _ in range(n)]


def _row_sum(x):
    return x.sum(-1, keepdim=True).expand(1, 32, 32)


def test_tapout_and_config_are_saved_per_input_and_kept_out_of_the_outputs():
    m = Chain("m")
    handle = m.insert_tapout_queue_for_op("relu", 0)
    pybuda.set_configuration_options(op_intermediates_to_save=["mm"])
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=m)
    xs = _inputs(2)
    out_q = pybuda.run_inference(inputs=[(x,) for x in xs], input_count=2)
    inter_q = pybuda.get_intermediates_queue()
    for x in xs:
        (out,) = out_q.get(timeout=60)  # one output: the taps do not reach the output queue
        item = inter_q.get_nowait()
        assert item.names == ["relu", "mm"] and len(item) == 2
        assert torch.allclose(item["mm"].value(), _row_sum(x), atol=ATOL)
        assert torch.allclose(item[handle].value(), torch.relu(_row_sum(x)), atol=ATOL)
        assert torch.allclose(item[0].value(), item[handle].value())
        assert torch.allclose(out.value(), torch.exp(torch.relu(_row_sum(x))), atol=ATOL)
    assert inter_q.empty()
    # the taps are netlist output queues, written by the device like any output
    netlist = tt.get_compiled_results()[0].netlist
    assert {"intermediate.relu", "intermediate.mm"} <= set(netlist.queues)
    with pytest.raises(pybuda.errors.InputError, match="exp"):
        item["exp"]


def test_tapout_on_a_submodule():
    class Outer(pybuda.PyBudaModule):
        def __init__(self, name):
            super().__init__(name)
            self.inner = Chain("inner")

        def forward(self, x):
            return pybuda.op.Add("add", self.inner(x), x)

    outer = Outer("outer")
    handle = outer.inner.insert_tapout_queue_for_op("mm", 0)
    pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=outer)
    x = _inputs(1)[0]
    pybuda.run_inference(inputs=[(x,)]).get(timeout=60)
    item = pybuda.get_intermediates_queue().get_nowait()
    assert torch.allclose(item[handle].value(), _row_sum(x), atol=ATOL)


def test_no_taps_means_no_intermediates():
    pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Chain("m"))
    pybuda.run_inference(inputs=[_inputs(1)[0]]).get(timeout=60)
    assert pybuda.get_intermediates_queue().empty()
    pybuda.shutdown()
    assert pybuda.get_intermediates_queue() is None  # no pipeline


def test_tap_inserted_after_a_run_recompiles():
    m = Chain("m")
    pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=m)
    x = _inputs(1)[0]
    pybuda.run_inference(inputs=[(x,)]).get(timeout=60)
    m.insert_tapout_queue_for_op("mm", 0)
    pybuda.run_inference(inputs=[(x,)]).get(timeout=60)
    assert torch.allclose(pybuda.get_intermediates_queue().get_nowait()["mm"].value(), _row_sum(x), atol=ATOL)


def test_unknown_config_op_names_the_nearest_ops():
    pybuda.set_configuration_options(op_intermediates_to_save=["rleu"])
    pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Chain("m"))
    with pytest.raises(ConfigError, match=r"'rleu'.*nearest.*relu"):
        pybuda.run_inference(inputs=[_inputs(1)[0]])


def test_unknown_tapout_op_and_bad_output_index():
    m = Chain("m")
    m.insert_tapout_queue_for_op("matmul", 0)
    pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=m)
    with pytest.raises(ModuleError, match=r"no op 'matmul'.*'mm'"):
        pybuda.run_inference(inputs=[_inputs(1)[0]])
    pybuda.pybuda_reset()
    m = Chain("m")
    m.insert_tapout_queue_for_op("mm", 1)
    pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=m)
    with pytest.raises(ModuleError, match="output_index 1"):
        pybuda.run_inference(inputs=[_inputs(1)[0]])
    with pytest.raises(ModuleError, match="output_index"):
        m.insert_tapout_queue_for_op("mm", -1)


def test_taps_across_two_devices_and_in_thread_mode(monkeypatch):
    monkeypatch.setenv("PYBUDA_FORCE_THREADS", "1")
    monkeypatch.setenv("PYBUDA_FORCE_CONCURRENT", "1")
    a, b = Chain("a"), Chain("b")
    a.insert_tapout_queue_for_op("mm", 0)
    b.insert_tapout_queue_for_op("relu", 0)
    pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=a)
    pybuda.TTDevice("tt1", devtype=pybuda.BackendType.Golden, module=b)
    x = _inputs(1)[0]
    out = pybuda.run_inference(inputs=[(x,)]).get(timeout=60)
    pybuda.sync()
    q = pybuda.get_intermediates_queue()
    items = [q.get(timeout=60), q.get(timeout=60)]
    by_name = {item.names[0]: item for item in items}
    first = torch.exp(torch.relu(_row_sum(x)))
    assert torch.allclose(by_name["mm"][0].value(), _row_sum(x), atol=ATOL)
    assert torch.allclose(by_name["relu"][0].value(), torch.relu(_row_sum(first)), rtol=0.02, atol=0.5)
    assert torch.allclose(out[0].value(), torch.exp(torch.relu(_row_sum(first))), rtol=0.05)


def test_device_image_refuses_taps(tmp_path):
    m = Chain("m")
    m.insert_tapout_queue_for_op("mm", 0)
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, arch=pybuda.BackendDevice.Wormhole_B0, module=m)
    with pytest.raises(PybudaError, match="intermediates"):
        tt.compile_to_image(img_path=str(tmp_path / "m.tti"), sample_inputs=(_inputs(1)[0],))


def test_intermediates_cross_from_a_device_process(processes_mode):
    pybuda.set_configuration_options(op_intermediates_to_save=["relu"])
    pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Chain("m"))
    x = _inputs(1)[0]
    out_q = pybuda.run_inference(inputs=[(x,)])
    assert pybuda.runtime.context.current().mode == "processes"
    out = out_q.get(timeout=120)
    assert len(out) == 1
    pybuda.sync()
    item = pybuda.get_intermediates_queue().get(timeout=60)
    assert item.names == ["relu"]
    assert torch.allclose(item["relu"].value(), torch.relu(_row_sum(x)), atol=ATOL)
    pybuda.shutdown()
    pybuda.set_configuration_options(op_intermediates_to_save=["nope"])
    with pytest.raises(ConfigError, match="'nope'"):  # the device process reports its ops
        pybuda.run_inference(inputs=[(x,)])
