"""Pipelines of devices: numerics vs torch, resume without recompile, parameters, shutdown."""

import queue

import pytest
import torch

import pybuda
import pybuda.op
from pybuda.errors import InputError, PybudaError, RuntimeFailure
from pybuda.runtime import context, state

GET_TIMEOUT_S = 30
# The TTDevice runs the CPU reference until the golden backend lands; chip numerics will need looser
# bounds (PCC >= 0.99, as TT-Buda's verify did), so the checks below use both.
PCC = 0.99


class Matmul(pybuda.PyBudaModule):
    def __init__(self, name, weight):
        super().__init__(name)
        self.w = pybuda.Parameter(weight, requires_grad=False)

    def forward(self, x):
        return pybuda.op.Matmul("mm", x, self.w)


def _check_close(got, want):
    assert tuple(got.shape) == tuple(want.shape)
    assert pybuda.verify.calculate_pcc(want, got) >= PCC
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def _cpu_tt_cpu():
    torch.manual_seed(1)
    pre, post = torch.nn.Linear(32, 32), torch.nn.Linear(32, 16)
    w = torch.randn(32, 32) / 6
    pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("pre", pre))
    tt0 = pybuda.TTDevice("tt0", module=Matmul("mm0", w))
    pybuda.CPUDevice("cpu1", module=pybuda.PyTorchModule("post", post))

    def golden(x):
        with torch.no_grad():
            return post(pre(x) @ w)

    return tt0, golden


@pytest.mark.parametrize("mode", ["sequential", "threads"])
def test_cpu_tt_cpu_pipeline_matches_torch(mode, request):
    if mode == "threads":
        request.getfixturevalue("threads_mode")
    _, golden = _cpu_tt_cpu()
    xs = [torch.randn(4, 32) for _ in range(3)]  # microbatch 4
    q = pybuda.run_inference(inputs=[(x,) for x in xs])
    assert context.current().mode == mode
    assert [d.name for d in context.current().devices] == ["cpu0", "tt0", "cpu1"]
    for x in xs:
        out = q.get(timeout=GET_TIMEOUT_S)
        _check_close(out[0].value(), golden(x))


def test_microbatch_is_dim0_and_each_sample_runs():
    """tt-buda#56: a [32, 32] input is microbatch 32 of [1, 32] samples; it must work, not time out."""
    torch.manual_seed(2)
    w = torch.randn(32, 16)
    tt0 = pybuda.TTDevice("tt0", module=Matmul("mm0", w))
    x = torch.randn(32, 32)
    out = pybuda.run_inference(inputs=[x]).get(timeout=GET_TIMEOUT_S)
    assert tt0.microbatch_size == 32
    _check_close(out[0].value(), x @ w)
    graph = tt0._artifact.stages[0].graph
    assert graph.microbatch == 32 and tuple(graph.inputs[0].shape) == (1, 32)


def test_resume_without_recompile_and_recompile_on_change():
    tt0 = pybuda.TTDevice("tt0", module=Matmul("mm0", torch.randn(32, 32)))
    x = torch.randn(1, 32, 32)
    q1 = pybuda.run_inference(inputs=[x])
    ctx = context.current()
    q1.get(timeout=GET_TIMEOUT_S)
    assert tt0._compile_count == 1
    q2 = pybuda.run_inference(inputs=[x, x])
    assert q2 is q1 and context.current() is ctx and tt0._compile_count == 1
    assert len([q2.get(timeout=GET_TIMEOUT_S) for _ in range(2)]) == 2

    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float16_b)  # config changed
    pybuda.run_inference(inputs=[x]).get(timeout=GET_TIMEOUT_S)
    assert tt0._compile_count == 2 and context.current() is not ctx

    module = tt0.modules[0]
    module.set_parameter("mm0.w", torch.eye(32))  # a parameter changed: recompile, and use it
    out = pybuda.run_inference(inputs=[x]).get(timeout=GET_TIMEOUT_S)
    assert tt0._compile_count == 3
    _check_close(out[0].value(), x)


def test_parameters_key_follows_the_values_not_their_addresses():
    from pybuda.runtime.api import _parameters_key, _same_parameters

    module = Matmul("mm0", torch.randn(32, 32))
    lin = torch.nn.Linear(4, 4)
    devices = [pybuda.TTDevice("tt0", module=module), pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("lin", lin))]
    key = _parameters_key(devices)
    assert _same_parameters(key, _parameters_key(devices))
    with torch.no_grad():
        lin.bias.add_(1.0)  # in place: a new version
    assert not _same_parameters(key, _parameters_key(devices))
    key = _parameters_key(devices)
    # A replaced value is another tensor even where the new one sits at the freed one's address and has
    # the same version (an id()/data_ptr key could not tell them apart): the old reference is dead.
    module.set_parameter("mm0.w", torch.randn(32, 32))
    assert not _same_parameters(key, _parameters_key(devices))
    lin.weight = torch.nn.Parameter(torch.randn(4, 4))
    assert not _same_parameters(_parameters_key(devices)[:1] + key[1:], _parameters_key(devices))
    assert not _same_parameters(None, _parameters_key(devices))


def test_module_run_recompiles_for_new_shapes_and_resumes_for_same():
    module = Matmul("mm0", torch.randn(32, 8))
    a = module.run(torch.randn(1, 32))
    dev = module.get_device()
    assert dev.name == "auto_tt0" and dev._compile_count == 1
    module.run(torch.randn(1, 32))
    assert dev._compile_count == 1
    b = module.run(torch.randn(5, 32))  # new microbatch: the shortcut recompiles
    assert dev._compile_count == 2
    assert tuple(a[0].shape) == (1, 8) and tuple(b[0].shape) == (5, 8)


def test_manual_loop_with_initialize_pipeline():
    _, golden = _cpu_tt_cpu()
    sample = torch.randn(2, 32)
    mirror = [queue.Queue(), queue.Queue()]
    out_q = pybuda.initialize_pipeline(training=False, sample_inputs=(sample,), d2d_fwd_queues=mirror)
    first = pybuda.runtime.state.user_devices()[0]
    xs = [torch.randn(2, 32) for _ in range(2)]
    for x in xs:
        first.push_to_inputs(x)
    pybuda.run_forward(input_count=2)
    pybuda.sync()
    for x in xs:
        _check_close(out_q.get(timeout=GET_TIMEOUT_S)[0].value(), golden(x))
    assert mirror[0].qsize() == 2 and mirror[1].qsize() == 2  # cpu0 -> tt0 and tt0 -> cpu1 traffic
    assert tuple(mirror[0].get_nowait()[0].shape) == (2, 32)


def test_parameter_checkpoint_and_update():
    w = torch.randn(32, 32)
    tt0 = pybuda.TTDevice("tt0", module=Matmul("mm0", w))
    lin = torch.nn.Linear(32, 4)
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("head", lin))
    x = torch.randn(1, 32)
    q = pybuda.run_inference(inputs=[x])
    q.get(timeout=GET_TIMEOUT_S)
    ckpt = pybuda.get_parameter_checkpoint()
    assert len(ckpt) == 2
    assert torch.equal(ckpt[0]["mm0.w"].value(), w)
    assert set(ckpt[1]) == {"weight", "bias"}
    assert pybuda.get_parameter_checkpoint(device=cpu0)[0].keys() == ckpt[1].keys()

    pybuda.update_device_parameters(parameters=[{"mm0.w": torch.eye(32)}, {"bias": torch.zeros(4)}])
    tt0.push_to_inputs(x)
    pybuda.run_forward(1)
    with torch.no_grad():
        want = x @ lin.weight.T
    _check_close(q.get(timeout=GET_TIMEOUT_S)[0].value(), want)
    with pytest.raises(InputError, match="unknown parameter"):
        pybuda.update_device_parameters(device=tt0, parameters=[{"nope": torch.eye(32)}])
    with pytest.raises(InputError, match="shape"):
        pybuda.update_device_parameters(device=tt0, parameters=[{"mm0.w": torch.eye(16)}])
    with pytest.raises(InputError, match="2 device"):
        pybuda.update_device_parameters(parameters=[{}])


def test_shutdown_is_idempotent_and_output_queue_cannot_hang():
    tt0 = pybuda.TTDevice("tt0", module=Matmul("mm0", torch.randn(32, 32)))
    q = pybuda.run_inference(inputs=[torch.randn(1, 32)])
    pybuda.shutdown()
    pybuda.shutdown()
    assert context.current() is None
    assert tuple(q.get(timeout=GET_TIMEOUT_S)[0].shape) == (1, 32)  # outputs survive shutdown
    with pytest.raises(RuntimeFailure, match="shut down"):
        q.get()  # no timeout: would block forever on a plain queue
    pybuda.sync()  # no pipeline: nothing to wait for
    # A new run after shutdown initializes again.
    tt0.push_to_inputs(torch.randn(1, 32))
    assert tuple(pybuda.run_inference().get(timeout=GET_TIMEOUT_S)[0].shape) == (1, 32)


def test_set_device_pipeline_order():
    torch.manual_seed(3)
    a, b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    cpu_a = pybuda.CPUDevice("a", module=pybuda.PyTorchModule("a", a))
    cpu_b = pybuda.CPUDevice("b", module=pybuda.PyTorchModule("b", b))
    pybuda.set_device_pipeline([cpu_b, cpu_a])
    x = torch.randn(1, 8)
    cpu_b.push_to_inputs(x)
    out = pybuda.run_inference().get(timeout=GET_TIMEOUT_S)
    with torch.no_grad():
        torch.testing.assert_close(out[0].value(), a(b(x)))


def test_compile_only_mode_compiles_but_does_not_run():
    tt0 = pybuda.TTDevice("tt0", module=Matmul("mm0", torch.randn(32, 32)),
                          device_mode=pybuda.DeviceMode.CompileOnly)
    tt0.push_to_inputs(torch.randn(1, 32))
    pybuda.initialize_pipeline(training=False)
    assert tt0._compile_count == 1
    with pytest.raises(PybudaError, match="CompileOnly"):
        pybuda.run_forward(1)


def test_training_calls_without_a_training_pipeline_say_so():
    for call in (pybuda.run_backward, pybuda.run_optimizer, pybuda.run_schedulers, pybuda.get_parameter_gradients):
        with pytest.raises(PybudaError, match="no training pipeline is running"):
            call()
    with pytest.raises(PybudaError, match="no devices"):
        pybuda.run_training()
    pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("lin", torch.nn.Linear(4, 2)))
    pybuda.initialize_pipeline(training=True, sample_inputs=(torch.randn(1, 4),))
    pybuda.get_parameter_gradients()  # empty before a backward
    with pytest.raises(PybudaError, match="no loss module"):
        pybuda.run_backward()


def test_device_defaults():
    assert pybuda.detect_available_devices() == [pybuda.BackendDevice.Grayskull]  # the simulated card
    tt = pybuda.TTDevice("tt0")
    assert tt.arch == pybuda.BackendDevice.Grayskull and tt.devtype == pybuda.BackendType.Golden
    assert tt.chip_ids == [0]
    assert pybuda.TTDevice("tt1", num_chips=2, arch=pybuda.BackendDevice.Wormhole_B0).chip_ids == [0, 1]
    with pytest.raises(pybuda.errors.ConfigError):
        pybuda.TTDevice("tt2", num_chips=2, chip_ids=[0])
    assert [d.name for d in state.user_devices()] == ["tt0", "tt1"]


def test_golden_wormhole_env_default(monkeypatch):
    monkeypatch.setenv("GOLDEN_WORMHOLE_B0", "1")
    monkeypatch.setenv("PYBUDA_DEVMODE", "1")
    tt = pybuda.TTDevice("tt0")
    assert tt.arch == pybuda.BackendDevice.Wormhole_B0 and tt.devtype == pybuda.BackendType.Golden


class EmbedThenProject(torch.nn.Module):
    """An embedding lookup (in cpu_fallback_ops by default) followed by device-friendly ops."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 32)
        self.proj = torch.nn.Linear(32, 16)

    def forward(self, input_ids):
        return torch.relu(self.proj(self.embed(input_ids)))


def test_cpu_fallback_devices_are_inserted_for_embeddings():
    torch.manual_seed(0)
    model = EmbedThenProject().eval()
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("embed_proj", model))
    ids = torch.randint(0, 50, (2, 16))
    q = pybuda.run_inference(inputs=[{"input_ids": ids}])
    out = q.get(timeout=GET_TIMEOUT_S)
    # The embedding runs on an inserted CPU device; the user's device list is unchanged.
    assert [d.name for d in context.current().devices] == ["cpu0_fallback", "tt0"]
    assert tt0.cpu_fallback_device_pre is not None
    assert [d.name for d in state.user_devices()] == ["tt0"]
    with torch.no_grad():
        golden = model(ids)
    _check_close(out[0].value(), golden)
    # Later pushes to the TTDevice are redirected to the fallback device, and validated there.
    tt0.push_to_inputs({"input_ids": ids.flip(0)})
    with pytest.raises(InputError, match="shape"):
        tt0.push_to_inputs({"input_ids": ids[:1]})
    pybuda.run_forward(1)
    with torch.no_grad():
        _check_close(q.get(timeout=GET_TIMEOUT_S)[0].value(), model(ids.flip(0)))


def test_sequential_get_beyond_outputs_raises_instead_of_hanging():
    pybuda.TTDevice("tt0", module=Matmul("mm0", torch.randn(32, 32)))
    q = pybuda.run_inference(inputs=[torch.randn(1, 32)])
    q.get(timeout=GET_TIMEOUT_S)
    # Sequential mode produced everything inline; a second get() could only block forever.
    with pytest.raises(queue.Empty):
        q.get(timeout=10)
    with pytest.raises(PybudaError, match="nothing can fill it"):
        context.current().watch(forever=True)


def test_sequential_failure_is_raised_then_reported():
    class Boom(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                raise ValueError("positive input")
            return x

    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("boom", Boom()))
    cpu0.push_to_inputs(-torch.ones(1, 4))  # the compile sample, and the first input
    q = pybuda.initialize_pipeline(training=False)
    pybuda.run_forward(1)
    cpu0.push_to_inputs(torch.ones(1, 4))
    # Sequential mode reports a module's exception as concurrent mode does: RuntimeFailure naming the
    # device and the module, with the original exception as its cause.
    with pytest.raises(RuntimeFailure, match="positive input") as info:
        pybuda.run_forward(1)
    assert info.value.device_name == "cpu0" and info.value.module_name == "boom"
    assert isinstance(info.value.__cause__, ValueError)
    assert pybuda.error_raised()
    with pytest.raises(RuntimeFailure, match="positive input"):
        cpu0.push_to_inputs(-torch.ones(1, 4))
    assert torch.equal(q.get(timeout=GET_TIMEOUT_S)[0].value(), -torch.ones(1, 4))
    with pytest.raises(RuntimeFailure):
        q.get(timeout=GET_TIMEOUT_S)


def test_module_run_with_cpu_fallback_and_new_shapes():
    torch.manual_seed(0)
    model = EmbedThenProject().eval()
    module = pybuda.PyTorchModule("embed_proj", model)
    ids = torch.randint(0, 50, (1, 8))
    with torch.no_grad():
        _check_close(module.run(ids)[0].value(), model(ids))
        ids2 = torch.randint(0, 50, (3, 4))  # new shape: the shortcut splits and compiles again
        _check_close(module.run(ids2)[0].value(), model(ids2))
    assert [d.name for d in context.current().devices] == ["cpu0_fallback", "auto_tt0"]
