"""The Device / TTDevice methods of the API reference (seed 004, "Device Types"), each called as documented."""

import pytest
import torch

import pybuda
from pybuda.errors import ConfigError, InputError, PybudaError
from pybuda.runtime.commands import Command, CommandType


def _w(shape, seed):
    return pybuda.Parameter(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 0.1,
                            requires_grad=False)


class Lin(pybuda.PyBudaModule):
    def __init__(self, name, k, n, seed):
        super().__init__(name)
        self.w = _w((k, n), seed)
        self.unused = _w((3, 3), seed + 100)

    def forward(self, x):
        return pybuda.op.Relu(f"{self.name}_relu", pybuda.op.Matmul(f"{self.name}_mm", x, self.w))


def test_get_first_inputs_is_microbatch_and_tensors():
    tt = pybuda.TTDevice("tt0", module=Lin("a", 40, 24, 1))
    assert tt.get_first_inputs() is None
    x = torch.randn(3, 10, 40)
    tt.push_to_inputs(x)
    mb, inputs = tt.get_first_inputs(peek=True)
    assert mb == 3 and len(inputs) == 1 and torch.equal(inputs[0], x)
    assert tt.get_first_inputs()[0] == 3  # still the compile sample
    assert tt.get_first_targets() is None


def test_compile_for_returns_output_tensors():
    x = torch.randn(2, 10, 40)
    tt = pybuda.TTDevice("tt0", module=[Lin("a", 40, 24, 1), Lin("b", 24, 8, 2)])
    outs = tt.compile_for((pybuda.Tensor.create_from_torch(x),), pybuda.config._get_global_compiler_config(),
                          microbatch_size=2)
    assert len(outs) == 1 and tuple(outs[0].shape.dims) == (2, 10, 8)
    assert tt.get_compiled_results()[0].netlist is not None
    with pytest.raises(InputError, match="microbatch_size=4"):
        tt.compile_for((x,), microbatch_size=4)
    with pytest.raises(PybudaError, match="training"):
        tt.compile_for((x,), targets=[x])
    cpu = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("lin", torch.nn.Linear(40, 5)))
    (out,) = cpu.compile_for((x,))
    assert tuple(out.shape.dims) == (2, 10, 5)


def test_command_queue_and_dc_transfer():
    tt = pybuda.TTDevice("tt0", module=Lin("a", 40, 24, 1))
    with pytest.raises(PybudaError, match="initialize_pipeline"):
        tt.push_to_command_queue(Command.sync())
    pybuda.initialize_pipeline(training=False, sample_inputs=(torch.randn(1, 10, 40),))
    assert tt.get_command_queue_response() is None
    tt.push_to_command_queue(Command.sync())
    tt.push_to_command_queue(Command(CommandType.GET_PARAMETER_CHECKPOINT))
    assert tt.get_command_queue_response() is True
    checkpoint = tt.get_command_queue_response()
    assert set(checkpoint) == {"a.w", "a.unused"} or "a.w" in checkpoint
    tt.dc_transfer("forward")
    with pytest.raises(InputError, match="unknown transfer direction"):
        tt.dc_transfer("sideways")
    with pytest.raises(PybudaError, match="training"):
        tt.dc_transfer("backward")
    with pytest.raises(InputError, match="Command"):
        tt.push_to_command_queue("sync")


def test_generate_graph_with_intermediates():
    tt = pybuda.TTDevice("tt0", module=Lin("a", 40, 24, 1))
    x = torch.randn(1, 10, 40)
    graph, outputs, intermediates, inputs, targets = tt.generate_graph(pybuda.Tensor.create_from_torch(x),
                                                                       return_intermediate=True)
    assert graph.name == "default_graph" and targets is None
    expected = torch.relu(x @ tt.modules[0].w.value())
    assert torch.allclose(outputs[0].value(), expected, atol=1e-6)
    mm = x @ tt.modules[0].w.value()
    assert any(v.shape == mm.shape and torch.allclose(v, mm, atol=1e-6) for v in intermediates.values())
    assert torch.equal(inputs[0].value(), x)
    _, outputs, intermediates, _, _ = tt.generate_graph(x, trace_only=True)
    assert outputs == () and intermediates == {}


def test_parameters_and_dram_io_queues():
    tt = pybuda.TTDevice("tt0", module=Lin("a", 40, 24, 1))
    assert {p.get_name() for p in tt.get_parameters()} == {"a.w", "a.unused"}
    with pytest.raises(PybudaError, match="not compiled"):
        tt.get_dram_io_queues("input")
    pybuda.initialize_pipeline(training=False, sample_inputs=(torch.randn(1, 10, 40),))
    # The unused parameter is not in the compiled graph, so it is left out by default.
    assert [p.get_name() for p in tt.get_parameters()] == ["a.w"]
    assert {p.get_name() for p in tt.get_parameters(ignore_unused_parameters=False)} == {"a.w", "a.unused"}
    assert set(tt.get_all_parameters()) == {"a.w"}
    (inp,) = tt.get_dram_io_queues("input")
    (out,) = tt.get_dram_io_queues("output")
    assert inp.kind == "input" and tuple(inp.framework_shape) == (1, 10, 40) and out.kind == "output"
    assert [q.name for q in tt.get_dram_io_queues("parameter")] == ["a.w"]
    with pytest.raises(PybudaError, match="training"):
        tt.get_dram_io_queues("target")
    with pytest.raises(InputError, match="unknown queue type"):
        tt.get_dram_io_queues("weights")


def test_active_subgraph_runs_one_module():
    a, b = Lin("a", 40, 24, 1), Lin("b", 24, 8, 2)
    tt = pybuda.TTDevice("tt0", module=[a, b])
    x = torch.randn(1, 10, 40)
    full = pybuda.run_inference(inputs=[(x,)]).get()[0].value()
    assert tt.get_active_subgraph() is None
    tt.set_active_subgraph(1)
    h = torch.relu(x @ a.w.value())
    tt.push_to_inputs(h)
    pybuda.run_forward(input_count=1)
    only_b = pybuda.runtime.context.current().output_queue.get()[0].value()
    assert torch.allclose(only_b, full, atol=0.05) and only_b.shape == (1, 10, 8)
    with pytest.raises(InputError, match="subgraph 1"):
        tt.push_to_inputs(x)
    with pytest.raises(InputError, match="2 subgraph"):
        tt.set_active_subgraph(2)


def test_gpu_device_and_cluster():
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            pybuda.GPUDevice("gpu0")
    pybuda.set_configuration_options(device_config="wh_n300")
    cluster = pybuda.TTCluster("cluster", arch=pybuda.BackendDevice.Wormhole_B0)
    assert cluster.num_chips == 2 and cluster.chip_ids == [0, 1]
    assert pybuda.TTCluster("four", cluster_size=4, arch=pybuda.BackendDevice.Wormhole_B0).num_chips == 4
    with pytest.raises(ConfigError, match="cluster_size"):
        pybuda.TTCluster("bad", cluster_size=-1)


def test_gpu_device_moves_tensors_to_its_device_and_back(monkeypatch):
    """The GPUDevice plumbing, on a machine without CUDA: torch.device('cpu') stands in for the GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    torch.manual_seed(0)
    lin = torch.nn.Linear(40, 6)
    gpu = pybuda.GPUDevice("gpu0", module=pybuda.PyTorchModule("lin", lin), device="cpu")
    x = torch.randn(2, 40)
    out = pybuda.run_inference(inputs=[(x,)]).get()[0].value()
    assert gpu.torch_device == torch.device("cpu")
    assert torch.allclose(out, lin(x).detach(), atol=1e-6) and out.device.type == "cpu"


def test_a_second_device_of_the_same_name_is_refused_until_reset():
    # shutdown keeps the devices: a script that created tt0 again after it chained the new tt0 after the old
    # one, which fed it its outputs (an argmax model returned 0 for [[7, 5, 3, 7]], with no error).
    from pybuda.errors import ModuleError

    x = torch.randn(1, 10, 40)
    pybuda.TTDevice("tt0", module=Lin("a", 40, 24, 1))
    first = pybuda.run_inference(inputs=[x]).get()[0].value()
    pybuda.shutdown()
    with pytest.raises(ModuleError, match=r"device named 'tt0' already exists.*pybuda_reset"):
        pybuda.TTDevice("tt0", module=Lin("a", 40, 24, 1))
    pybuda.pybuda_reset()
    pybuda.TTDevice("tt0", module=Lin("a", 40, 24, 1))
    assert torch.equal(pybuda.run_inference(inputs=[x]).get()[0].value(), first)
