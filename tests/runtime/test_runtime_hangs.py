"""Nothing hangs, and every mistake is a PybudaError (one test or more per class of hang or leak).

A call that used to block forever runs in a helper thread (or a subprocess) under a deadline: the test
fails, rather than wedging the suite, when the call is still blocked after a few seconds.

1. sequential ``output_queue.get()`` with nothing owed raises at once, whatever other threads exist,
   and still waits while another thread runs inputs;
2. concurrent modes know how many outputs are owed; ``get``/``sync`` raise when none can come, and
   ``shutdown`` (also at exit after Ctrl-C) stops workers promptly;
3. a device process ends when its host dies (SIGKILL, SIGTERM), even while busy in a module;
4. a module's exception in sequential mode is a RuntimeFailure naming device and module;
5. inputs pushed and not run never turn up as a later run's inputs;
6. a killed device process is reported as killed (by which signal), not as a missing ``__main__`` guard.
"""

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

import pybuda
from pybuda.errors import InputError, NoMoreOutputs, PybudaError, RuntimeFailure
from pybuda.runtime import context, worker

DEADLINE_S = 20.0  # a call that can answer at once gets this long before it counts as hung (the old hangs
# were forever or ~60 s; 20 s leaves room for process start-up on a loaded 2-core CI machine)
START_S = 60  # process start-up (spawn + import torch) on a loaded 2-core machine


def _finishes_within(fn, seconds=DEADLINE_S):
    """Run ``fn`` in a daemon thread; fail if it is still blocked after ``seconds``. Returns its result,
    or raises what it raised."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = e

    t = threading.Thread(target=target, name="hang-probe", daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} was still blocked after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _wait_for(pred, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def _device_threads():
    return [t for t in threading.enumerate() if t.name.startswith("pybuda-device-")]


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


class Gate(torch.nn.Module):
    """Doubles its input; a positive input waits at the gate until the test opens it."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def forward(self, x):
        if x.sum() > 0:
            self.entered.set()
            assert self.release.wait(30)
        return x * 2


def _cpu_double(name="cpu0"):
    return pybuda.CPUDevice(name, module=pybuda.PyTorchModule("double", Double()))


# --- 1. sequential mode ------------------------------------------------------------------------------
def test_sequential_get_with_nothing_owed_raises_although_other_threads_run():
    idle = threading.Event()
    bystander = threading.Thread(target=idle.wait, name="notebook-kernel", daemon=True)
    bystander.start()  # a notebook kernel, a progress bar: the get() below must not count on them
    try:
        _cpu_double()
        q = pybuda.run_inference(inputs=[torch.ones(1, 4)])
        assert context.current().mode == "sequential"
        assert torch.equal(q.get(timeout=DEADLINE_S)[0].value(), 2 * torch.ones(1, 4))
        with pytest.raises(NoMoreOutputs, match="nothing can fill it"):
            _finishes_within(q.get)
        with pytest.raises(queue.Empty):  # with a timeout: at once, and still a queue.Empty
            _finishes_within(lambda: q.get(timeout=60))
    finally:
        idle.set()


def test_sequential_get_waits_while_another_thread_runs_inputs():
    gate = Gate()
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("gate", gate))
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(-torch.ones(1, 4),))
    ctx = context.current()
    told_to_wait = threading.Event()

    def watcher():
        reason = ctx.outputs_exhausted()
        if reason is None:
            told_to_wait.set()
        return reason

    q._attach(watcher)
    cpu0.push_to_inputs(torch.ones(1, 4))
    runner = threading.Thread(target=pybuda.run_forward, args=(1,), daemon=True)
    runner.start()
    assert gate.entered.wait(DEADLINE_S)
    box = {}
    getter = threading.Thread(target=lambda: box.setdefault("out", q.get()), daemon=True)
    getter.start()
    assert told_to_wait.wait(DEADLINE_S)  # get() found the run in flight, and waits for its output
    gate.release.set()
    getter.join(DEADLINE_S)
    runner.join(DEADLINE_S)
    assert not getter.is_alive() and not runner.is_alive()
    assert torch.equal(box["out"][0].value(), 2 * torch.ones(1, 4))


# --- 2. concurrent modes ----------------------------------------------------------------------------------
def test_concurrent_get_after_every_output_was_read_raises(threads_mode):
    cpu0 = _cpu_double()
    q = pybuda.run_inference(inputs=[torch.ones(1, 4), torch.ones(1, 4)])
    assert context.current().mode == "threads"
    for _ in range(2):
        q.get(timeout=START_S)
    with pytest.raises(NoMoreOutputs, match="outputs of all 2 input"):
        _finishes_within(q.get)
    with pytest.raises(queue.Empty):
        _finishes_within(lambda: q.get(timeout=60))
    # Blocking semantics stay where an output is owed: run first, push later, then get.
    pybuda.run_forward(1)
    cpu0.push_to_inputs(3 * torch.ones(1, 4))
    assert torch.equal(_finishes_within(q.get, START_S)[0].value(), 6 * torch.ones(1, 4))


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_run_forward_without_inputs_neither_get_sync_nor_shutdown_hangs(mode, request, quiet_logs):
    request.getfixturevalue(f"{mode}_mode")
    _cpu_double()
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(torch.ones(1, 4),))
    assert context.current().mode == mode
    pybuda.run_forward(1)  # nothing pushed: the device waits for an input
    with pytest.raises(NoMoreOutputs, match="asked for 1 input.*only 0 were pushed"):
        _finishes_within(q.get)
    with pytest.raises(PybudaError, match="would wait forever"):
        _finishes_within(pybuda.sync)
    t0 = time.monotonic()
    _finishes_within(pybuda.shutdown)  # the waiting run ends: no 60 s graceful wait
    assert time.monotonic() - t0 < DEADLINE_S
    assert not pybuda.error_raised()
    assert _wait_until_no_workers()


def _wait_until_no_workers():
    import multiprocessing

    return _wait_for(lambda: not _device_threads() and not multiprocessing.active_children(), DEADLINE_S)


def test_threads_shutdown_finishes_owed_work_then_stops(threads_mode):
    gate = Gate()
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("gate", gate))
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(-torch.ones(1, 4),))
    cpu0.push_to_inputs(torch.ones(1, 4))
    pybuda.run_forward(2)  # one input owed an output, one never pushed
    assert gate.entered.wait(DEADLINE_S)
    gate.release.set()
    _finishes_within(pybuda.shutdown)
    assert torch.equal(q.get(timeout=DEADLINE_S)[0].value(), 2 * torch.ones(1, 4))  # graceful: delivered
    with pytest.raises(NoMoreOutputs, match="shut down"):
        _finishes_within(q.get)
    assert _wait_until_no_workers()


def test_ctrl_c_during_graceful_shutdown_still_stops_and_releases(threads_mode, monkeypatch, quiet_logs):
    gate = Gate()
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("gate", gate))
    pybuda.initialize_pipeline(training=False, sample_inputs=(-torch.ones(1, 4),))
    cpu0.push_to_inputs(torch.ones(1, 4))
    pybuda.run_forward(1)
    assert gate.entered.wait(DEADLINE_S)  # busy in its module

    def interrupted(self, workers):
        raise KeyboardInterrupt  # as if Ctrl-C arrived while shutdown waited for the busy device

    monkeypatch.setattr(context.RunContext, "_finish_queued_work", interrupted)
    ctx = context.current()
    with pytest.raises(KeyboardInterrupt):
        _finishes_within(pybuda.shutdown)
    assert ctx.closed and ctx._shutdown_event.is_set()
    assert cpu0._input_queue is cpu0._staging and cpu0._staging.empty()  # no stale queue, no stale input
    gate.release.set()
    assert _wait_until_no_workers()  # the busy thread stops at its next wait


def test_sigterm_handler_only_over_the_default_action():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set from the main thread only")
    saved = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert context._install_sigterm_handler()
        assert signal.getsignal(signal.SIGTERM) is context._on_sigterm
        context._restore_sigterm_handler()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

        def users_handler(signum, frame):
            pass

        signal.signal(signal.SIGTERM, users_handler)
        assert not context._install_sigterm_handler()
        assert signal.getsignal(signal.SIGTERM) is users_handler
        context._restore_sigterm_handler()
        assert signal.getsignal(signal.SIGTERM) is users_handler
    finally:
        signal.signal(signal.SIGTERM, saved)


# --- 2 (Ctrl-C) and 3: the host gets a signal while its device process is busy ------------------------------
def _alive(pid):
    """True for a running process (a zombie nobody reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _signal_state(pid):
    """The blocked, ignored and caught signal masks of ``pid`` (from /proc), for a failure message."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return ", ".join(line.strip() for line in f if line.startswith(("SigBlk", "SigIgn", "SigCgt")))
    except OSError:
        return "gone"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_signalled_host_exits_promptly_and_leaves_no_device_process(signame, tmp_path):
    sig = getattr(signal, signame)
    env = dict(os.environ, BUSY_HOST_STATE=str(tmp_path), PYBUDA_BUILD_DIR=str(tmp_path / "build"))
    for var in ("PYBUDA_FORCE_SEQUENTIAL", "PYBUDA_FORCE_THREADS", "PYBUDA_FORCE_CONCURRENT"):
        env.pop(var, None)
    script = os.path.join(os.path.dirname(__file__), "busy_host.py")
    log_path = tmp_path / "host.log"
    device_pid = None
    # Output goes to a file, not a pipe: a device process that outlives the host would hold a pipe open.
    with open(log_path, "w") as log_file:
        host = subprocess.Popen([sys.executable, script], env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        started = _wait_for(lambda: (tmp_path / "busy").exists() or host.poll() is not None, START_S)
        assert started and host.poll() is None, f"the host did not get its device busy:\n{log_path.read_text()}"
        device_pid, tracker_pid = (int(x) for x in (tmp_path / "pids").read_text().split())
        t0 = time.monotonic()
        os.kill(host.pid, sig)
        exited = _wait_for(lambda: host.poll() is not None, 20)  # before: ~62 s after Ctrl-C
        took = time.monotonic() - t0
        assert exited and took < 15, (f"the host took {took:.1f} s to exit after {signame} ({_signal_state(host.pid)}; "
                                      f"the test process: {_signal_state(os.getpid())}):\n{log_path.read_text()}")
        assert host.returncode == -sig  # SIGTERM: the handler stops devices, then the default action
        assert _wait_for(lambda: not _alive(device_pid), DEADLINE_S), "the device process outlived its host"
        if tracker_pid:
            assert _wait_for(lambda: not _alive(tracker_pid), DEADLINE_S), "the resource tracker outlived the host"
    finally:
        for pid in (host.pid, device_pid):
            if pid is not None and _alive(pid):
                os.kill(pid, signal.SIGKILL)
        host.wait()


# --- 4. a module's exception in sequential mode -------------------------------------------------------------
class Boom(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            raise ValueError("positive input")
        return x


@pytest.mark.parametrize("mode", ["sequential", "threads"])
def test_module_exception_is_runtime_failure_naming_device_and_module(mode, request, quiet_logs):
    if mode == "threads":
        request.getfixturevalue("threads_mode")
    cpu0 = pybuda.CPUDevice("cpu0", module=[pybuda.PyTorchModule("first", Double()),
                                            pybuda.PyTorchModule("boom", Boom())])
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(-torch.ones(1, 4),))
    assert context.current().mode == mode
    cpu0.push_to_inputs(torch.ones(1, 4))
    with pytest.raises(RuntimeFailure) as info:
        pybuda.run_forward(1)
        _finishes_within(lambda: q.get(timeout=START_S), START_S)
    err = info.value
    assert "device 'cpu0' (module 'boom')" in str(err) and "ValueError: positive input" in str(err)
    assert err.device_name == "cpu0" and err.module_name == "boom" and err.original_type == "ValueError"
    assert isinstance(err.__cause__, ValueError) and "Traceback" in err.traceback_text
    assert pybuda.error_raised()


def test_pybuda_errors_inside_a_sequential_device_are_not_wrapped():
    _cpu_double()
    pybuda.initialize_pipeline(training=False, sample_inputs=(torch.ones(1, 4),))
    with pytest.raises(InputError, match="only 0 are queued"):
        pybuda.run_forward(1)


# --- 5. nothing stale is consumed later ---------------------------------------------------------------------
def test_push_after_shutdown_is_not_run_in_place_of_later_inputs():
    cpu0 = _cpu_double()
    x1, x2, x3 = (k * torch.ones(1, 4) for k in (1, 2, 3))
    q = pybuda.run_inference(inputs=[x1])
    assert torch.equal(q.get(timeout=DEADLINE_S)[0].value(), 2 * x1)
    pybuda.shutdown()
    cpu0.push_to_inputs(x2)  # no pipeline: waits for the next one
    with pytest.raises(InputError, match="off by one"):
        pybuda.run_inference(inputs=[x3])
    pybuda.shutdown()  # drops it
    q = pybuda.run_inference(inputs=[x3])
    assert torch.equal(q.get(timeout=DEADLINE_S)[0].value(), 2 * x3)
    with pytest.raises(NoMoreOutputs):
        q.get(timeout=DEADLINE_S)
    # The manual flow still works: push, then run what was pushed.
    pybuda.shutdown()
    cpu0.push_to_inputs(x2)
    assert torch.equal(pybuda.run_inference().get(timeout=DEADLINE_S)[0].value(), 2 * x2)


@pytest.mark.parametrize("mode", ["sequential", "threads"])
def test_inputs_pushed_and_not_run_are_dropped_at_shutdown(mode, request):
    if mode == "threads":
        request.getfixturevalue("threads_mode")
    cpu0 = _cpu_double()
    q = pybuda.run_inference(inputs=[torch.ones(1, 4)])
    q.get(timeout=START_S)
    cpu0.push_to_inputs(7 * torch.ones(1, 4))  # pushed to the running pipeline, never run
    _finishes_within(pybuda.shutdown)
    q = pybuda.run_inference(inputs=[3 * torch.ones(1, 4)])
    assert torch.equal(q.get(timeout=START_S)[0].value(), 6 * torch.ones(1, 4))
    with pytest.raises(NoMoreOutputs):
        _finishes_within(q.get, START_S)


def test_inputs_queued_in_a_running_pipeline_are_not_run_in_place_of_new_ones():
    cpu0 = _cpu_double()
    q = pybuda.run_inference(inputs=[torch.ones(1, 4)])
    q.get(timeout=DEADLINE_S)
    cpu0.push_to_inputs(5 * torch.ones(1, 4))
    with pytest.raises(InputError, match="1 input.*still queued"):
        pybuda.run_inference(inputs=[torch.ones(1, 4)])
    assert torch.equal(pybuda.run_inference().get(timeout=DEADLINE_S)[0].value(), 10 * torch.ones(1, 4))


# --- 6. how a device process died ---------------------------------------------------------------------------------
def test_killed_device_process_is_reported_as_killed(processes_mode, quiet_logs):
    _cpu_double()
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(torch.ones(1, 4),))
    import multiprocessing

    (child,) = multiprocessing.active_children()
    os.kill(child.pid, signal.SIGKILL)
    child.join(DEADLINE_S)
    with pytest.raises(RuntimeFailure) as info:
        _finishes_within(lambda: q.get(timeout=START_S), START_S)
    text = str(info.value)
    assert "device process died" in text and "killed by SIGKILL" in text
    assert "__main__" not in text


def test_process_exit_descriptions():
    assert "killed by SIGTERM" in worker.describe_process_exit(-signal.SIGTERM, started=True)
    assert "lost its host" in worker.describe_process_exit(worker.EXIT_HOST_DIED, started=True)
    after_start = worker.describe_process_exit(1, started=True)
    assert "exit code 1" in after_start and "__main__" not in after_start
    # Dying before the first answer with an ordinary exit code is what a missing guard looks like.
    assert "__main__" in worker.describe_process_exit(1, started=False)
