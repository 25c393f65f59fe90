"""Concurrent mode: failures inside device threads/processes surface in the caller as RuntimeFailure,
everything shuts down, and no thread or process is left behind."""

import multiprocessing
import os
import signal
import threading
import time

import pytest
import torch

import pybuda
import pybuda.op
from pybuda.errors import RuntimeFailure
from pybuda.runtime import context

GET_TIMEOUT_S = 60  # process start-up (spawn + import torch) is slow on a loaded machine


class Matmul(pybuda.PyBudaModule):
    def __init__(self, name, weight):
        super().__init__(name)
        self.w = pybuda.Parameter(weight, requires_grad=False)

    def forward(self, x):
        return pybuda.op.Matmul("mm", x, self.w)


def _device_threads():
    return [t for t in threading.enumerate() if t.name.startswith("pybuda-")]


def _wait_until(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def _embedding_pipeline():
    """cpu0 (embedding of 10 rows) -> tt0 (matmul): an index >= 10 fails inside cpu0's worker."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 32)
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("emb", emb))
    pybuda.TTDevice("tt0", module=Matmul("mm0", torch.randn(32, 32)))
    return cpu0


def test_thread_failure_surfaces_and_shuts_down(threads_mode, quiet_logs):
    cpu0 = _embedding_pipeline()
    q = pybuda.run_inference(inputs=[torch.tensor([[1, 2, 3]])])
    assert context.current().mode == "threads"
    assert tuple(q.get(timeout=GET_TIMEOUT_S)[0].shape) == (1, 3, 32)
    assert len(_device_threads()) == 2

    cpu0.push_to_inputs(torch.tensor([[1, 99, 3]]))  # valid shape and dtype, bad value
    pybuda.run_forward(1)
    with pytest.raises(RuntimeFailure) as info:
        q.get(timeout=GET_TIMEOUT_S)
    err = info.value
    assert err.device_name == "cpu0" and err.original_type == "IndexError"
    assert "index out of range" in str(err) and "Traceback" in err.traceback_text
    assert isinstance(err.__cause__, IndexError)
    assert pybuda.error_raised()
    assert _wait_until(lambda: not _device_threads())
    # Every later call reports the failure instead of hanging.
    with pytest.raises(RuntimeFailure):
        cpu0.push_to_inputs(torch.tensor([[1, 2, 3]]))
    with pytest.raises(RuntimeFailure):
        pybuda.sync()
    with pytest.raises(RuntimeFailure):
        q.get()
    pybuda.shutdown()
    pybuda.shutdown()
    # A new run starts cleanly.
    cpu0.push_to_inputs(torch.tensor([[4, 5, 6]]))
    q2 = pybuda.run_inference()
    assert tuple(q2.get(timeout=GET_TIMEOUT_S)[0].shape) == (1, 3, 32)
    assert not pybuda.error_raised()


def test_thread_failure_during_compile(threads_mode, quiet_logs):
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise ValueError("broken model")

    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("broken", Broken()))
    cpu0.push_to_inputs(torch.randn(1, 4))
    with pytest.raises(RuntimeFailure, match="broken model"):
        pybuda.initialize_pipeline(training=False)
    assert context.current() is None
    assert _wait_until(lambda: not _device_threads())


def test_threads_run_forever_until_shutdown(threads_mode):
    w = torch.randn(32, 32)
    tt0 = pybuda.TTDevice("tt0", module=Matmul("mm0", w))
    x = torch.randn(1, 32)
    tt0.push_to_inputs(x)
    q = pybuda.initialize_pipeline(training=False)
    pybuda.run_forward(input_count=0)  # until shutdown
    for _ in range(3):
        tt0.push_to_inputs(x)
    outs = [q.get(timeout=GET_TIMEOUT_S) for _ in range(3)]
    torch.testing.assert_close(outs[-1][0].value(), x @ w)
    # Devices loop until shutdown: a command queued behind that loop would never run, so it is refused.
    with pytest.raises(pybuda.errors.PybudaError, match="until shutdown"):
        pybuda.get_parameter_checkpoint()
    pybuda.shutdown()
    assert _wait_until(lambda: not _device_threads())
    assert not pybuda.error_raised()
    assert torch.equal(pybuda.get_parameter_checkpoint()[0]["mm0.w"].value(), w)


def test_threads_resume_without_recompile(threads_mode):
    tt0 = pybuda.TTDevice("tt0", module=Matmul("mm0", torch.randn(32, 32)))
    x = torch.randn(2, 32)
    q = pybuda.run_inference(inputs=[x])
    ctx = context.current()
    q.get(timeout=GET_TIMEOUT_S)
    q2 = pybuda.run_inference(inputs=[x, x])
    assert q2 is q and context.current() is ctx and tt0._compile_count == 1
    for _ in range(2):
        q.get(timeout=GET_TIMEOUT_S)
    pybuda.sync()
    ckpt = pybuda.get_parameter_checkpoint()  # a command answered by the worker thread
    assert set(ckpt[0]) == {"mm0.w"}


def test_process_failure_surfaces_and_leaves_no_children(processes_mode, quiet_logs):
    emb = torch.nn.Embedding(10, 8)
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("emb", emb))
    q = pybuda.run_inference(inputs=[torch.tensor([[1, 2]])])
    assert context.current().mode == "processes"
    out = q.get(timeout=GET_TIMEOUT_S)
    with torch.no_grad():
        torch.testing.assert_close(out[0].value(), emb(torch.tensor([[1, 2]])))
    assert len(multiprocessing.active_children()) == 1

    cpu0.push_to_inputs(torch.tensor([[50, 1]]))
    pybuda.run_forward(1)
    with pytest.raises(RuntimeFailure) as info:
        q.get(timeout=GET_TIMEOUT_S)
    assert info.value.device_name == "cpu0" and "IndexError" in str(info.value)
    assert "index out of range" in info.value.traceback_text
    assert multiprocessing.active_children() == []
    assert pybuda.error_raised()
    pybuda.shutdown()


def test_killed_process_is_detected(processes_mode, quiet_logs):
    lin = torch.nn.Linear(4, 4)
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("lin", lin))
    cpu0.push_to_inputs(torch.randn(1, 4))
    q = pybuda.initialize_pipeline(training=False)
    (child,) = multiprocessing.active_children()
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    with pytest.raises(RuntimeFailure, match="exited unexpectedly"):
        q.get(timeout=GET_TIMEOUT_S)
    assert multiprocessing.active_children() == []
    pybuda.shutdown()
