"""The run API: run_inference, initialize_pipeline, run_forward, sync, shutdown and friends.

Semantics follow TT-Buda (``reference/ttbuda_spec.md`` §1.2):

* ``run_inference(module=m)`` creates ``TTDevice("auto_tt0")`` if there is no device, and places
  ``m`` alone on the first device. Each element of ``inputs`` (a tuple, a dict of keyword inputs, or a
  single tensor) is pushed to the first device; ``input_count`` must then be 1 or ``len(inputs)``.
* Calling ``run_inference`` again with nothing changed (same devices, modules, pipeline order and
  compiler config, and the same output queue) **resumes** the running pipeline: no recompile. With
  the ``module`` shortcut, inputs of a new shape recompile (``Module.run`` on new shapes just works);
  a manual pipeline rejects them with InputError.
* Concurrent mode returns at once; sequential mode (the default with the simulated chip, see
  :mod:`pybuda.runtime.context`) returns after all outputs are in the queue.
* The returned queue yields one list of :class:`pybuda.Tensor` per input (``.value()`` gives torch).

Training (``initialize_pipeline(training=True)``, ``run_training``, ``run_forward``/``run_backward``/
``run_optimizer``/``run_schedulers``) runs through :mod:`pybuda.runtime.training`, sequentially.

Old keyword names from TT-Buda's documentation are accepted with a DeprecationWarning:
``num_inputs`` for ``input_count`` and ``sequential`` for ``_sequential`` (tt-buda PR#13).
"""

from __future__ import annotations

import logging
import queue
import warnings
import weakref
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from pybuda.config import DeviceMode, _clear_global_compiler_config, _get_global_compiler_config, runtime_env
from pybuda.errors import InputError, PybudaError
from pybuda.runtime import context, state
from pybuda.runtime.context import PROCESSES, SEQUENTIAL, THREADS, RunContext
from pybuda.runtime.device import Device
from pybuda.runtime.push import InputItem, normalize_push
from pybuda.runtime.transport import OutputQueue

log = logging.getLogger(__name__)

_LEGACY_KWARGS = {"num_inputs": "input_count", "sequential": "_sequential"}


def _legacy(func: str, kwargs: Dict[str, Any], values: Dict[str, Any]) -> Dict[str, Any]:
    for old, value in kwargs.items():
        new = _LEGACY_KWARGS.get(old)
        if new is None or new not in values:
            raise TypeError(f"{func}() got an unexpected keyword argument '{old}'")
        warnings.warn(f"{func}({old}=...) is the old TT-Buda spelling; use {new}=...", DeprecationWarning,
                      stacklevel=3)
        values[new] = value
    return values


def _config_key() -> Any:
    return _get_global_compiler_config().to_dict()


# --- pipeline setup ----------------------------------------------------------------------------------
def _choose_mode(devices: Sequence[Device], sequential: bool) -> str:
    from pybuda.arch.types import BackendType
    from pybuda.runtime.ttdevice import TTDevice

    env = runtime_env()
    if sequential or env.force_sequential:
        return SEQUENTIAL
    simulated = any(isinstance(d, TTDevice) and d.devtype in (BackendType.Golden, BackendType.Model) for d in devices)
    if simulated and not env.force_concurrent:
        return SEQUENTIAL
    return THREADS if env.force_threads else PROCESSES


def initialize_pipeline(training: bool, output_queue: Optional[queue.Queue] = None, checkpoint_queue: Any = None,
                        sample_inputs: Union[Tuple[Any, ...], Dict[str, Any]] = (), sample_targets: Tuple[Any, ...] = (),
                        microbatch_count: int = 1, d2d_fwd_queues: Sequence[Any] = (),
                        d2d_bwd_queues: Sequence[Any] = (), _sequential: bool = False, _verify_cfg: Any = None,
                        _device_mode: DeviceMode = DeviceMode.CompileAndRun, **legacy: Any) -> queue.Queue:
    """Compile and connect the devices without running anything; returns the output queue.

    ``sample_inputs`` (a tuple, or a dict naming the inputs) is the compile sample when nothing was
    pushed yet; otherwise the first push is. Each device's sample outputs are the next device's sample.
    ``d2d_fwd_queues[i]`` also receives what device ``i`` sends to device ``i+1``.
    With ``training``, the devices compile forward, backward and optimizer programs
    (:mod:`pybuda.runtime.training`); ``sample_targets`` is then the loss module's compile sample unless
    targets were pushed, and ``checkpoint_queue`` receives ``run_optimizer(checkpoint=True)`` checkpoints.
    ``microbatch_count`` and ``d2d_bwd_queues`` are accepted for TT-Buda's signature.
    ``_device_mode=DeviceMode.CompileOnly`` compiles only.
    """
    _sequential = _legacy("initialize_pipeline", legacy, {"_sequential": _sequential})["_sequential"]
    context.shutdown_current()
    context.clear_error()
    _close_training()
    devices = _checked_devices(training)
    first_user = devices[0]
    if isinstance(sample_inputs, Mapping) or len(sample_inputs) > 0:
        first_user.set_sample_inputs(sample_inputs)
    if first_user.first_input_item() is None:
        raise InputError(f"no inputs to compile for: push an input to '{first_user.name}' (push_to_inputs) or pass "
                         f"sample_inputs/inputs")
    mb = first_user.microbatch_size or 1
    for d in devices:  # every device records the run shape, as TT-Buda's compile_for did
        Device.compile_for(d, training, mb, microbatch_count)
    config = _get_global_compiler_config().snapshot()
    if training:
        from pybuda.runtime import training as train
        from pybuda.runtime.data_parallel import data_parallel_requested

        if data_parallel_requested():
            from pybuda.errors import ConfigError

            raise ConfigError("PYBUDA_N300_DATA_PARALLEL splits inference microbatches between the chips of an n300; "
                              "training pipelines do not support it: unset it to train")

        if config.training_saved_microbatches is None:
            # TT-Buda sized the forward->backward queues for the microbatches of one step
            from pybuda.netlist.training import DEFAULT_SAVED_MICROBATCHES

            config.training_saved_microbatches = max(DEFAULT_SAVED_MICROBATCHES, int(microbatch_count or 1))
        out_q = output_queue if output_queue is not None else OutputQueue()
        train.start(_translate(devices, config), config, out_q, checkpoint_queue, sample_targets)
        return out_q
    return _initialize_inference(devices, config, output_queue, d2d_fwd_queues, _sequential, _verify_cfg,
                                 _device_mode)


def _checked_devices(training: bool = False) -> List[Device]:
    """The user's devices, each holding modules, or in training only a loss module (PybudaError otherwise)."""
    devices = state.user_devices()
    if not devices:
        raise PybudaError("no devices: create a TTDevice or CPUDevice and place a module on it, or call "
                          "run_inference(module=...)")
    for d in devices:
        if not d.modules and not (training and d.loss_module is not None):
            raise PybudaError(f"device '{d.name}' has no modules; place one with place_module or remove the device "
                              f"(pybuda_reset)")
    for d in devices[1:]:
        if d.first_input_item() is not None and not d._staging.empty():
            raise InputError(f"inputs were pushed to '{d.name}', which is not the first device of the pipeline; "
                             f"push them to '{devices[0].name}'")
    return devices


def _initialize_inference(devices: List[Device], config: Any, output_queue: Optional[queue.Queue],
                          d2d_fwd_queues: Sequence[Any], _sequential: bool, _verify_cfg: Any,
                          _device_mode: DeviceMode) -> queue.Queue:
    serial = state.state_serial()
    pipeline = _translate(devices, config)
    mode = _choose_mode(pipeline, _sequential)
    out_q = output_queue if output_queue is not None else OutputQueue()
    compile_only = _device_mode == DeviceMode.CompileOnly or any(
        getattr(d, "device_mode", DeviceMode.CompileAndRun) == DeviceMode.CompileOnly for d in pipeline)
    ctx = RunContext(pipeline, mode, out_q, serial=serial, config_key=config.to_dict(), compile_only=compile_only)
    ctx.parameters_key = _parameters_key(devices)
    log.info("pipeline %s in %s mode", " -> ".join(d.name for d in pipeline), mode)
    context.set_current(ctx)
    try:
        ctx.connect(d2d_fwd_queues)
        ctx.start()
        ctx.compile(pipeline[0]._first_inputs, config, _verify_cfg)
    except BaseException:
        context.shutdown_current()
        raise
    return out_q


def _translate(devices: Sequence[Device], config: Any) -> List[Device]:
    from pybuda.runtime.stages import translate_pipeline

    return translate_pipeline(devices, config)


def _parameters_key(devices: Sequence[Device]) -> Tuple[Tuple[str, Any, int], ...]:
    """Every parameter value of the user's modules as ``(name, weak reference, version)``: compared with
    :func:`_same_parameters`, a difference means a parameter was set or modified in place since the
    pipeline was compiled. The value itself is referenced, not its ``id`` or address, which a new tensor
    can reuse once the old one is freed; the reference is weak, so a replaced value is not kept alive."""
    from pybuda.module import PyBudaModule, PyTorchModule

    key: List[Tuple[str, Any, int]] = []
    for d in devices:
        for m in d.modules:
            if isinstance(m, PyBudaModule):
                for p in m.get_parameters():
                    v = p._value
                    key.append((p.get_name(), None if v is None else weakref.ref(v), -1 if v is None else v._version))
            elif isinstance(m, PyTorchModule):
                for n, p in m.module.named_parameters():
                    key.append((n, weakref.ref(p), p._version))
    return tuple(key)


def _same_parameters(old: Optional[Tuple[Tuple[str, Any, int], ...]], new: Tuple[Tuple[str, Any, int], ...]) -> bool:
    """Whether two :func:`_parameters_key` results name the same live values at the same versions (a
    weak reference whose value was freed matches nothing)."""
    if old is None or len(old) != len(new):
        return False
    for (name_a, ref_a, ver_a), (name_b, ref_b, ver_b) in zip(old, new):
        if name_a != name_b or ver_a != ver_b or (ref_a is None) != (ref_b is None):
            return False
        if ref_a is not None and (ref_a() is None or ref_a() is not ref_b()):
            return False
    return True


def _can_resume(ctx: Optional[RunContext], output_queue: Any) -> bool:
    return (ctx is not None and not ctx.closed and ctx.error is None and not ctx.forever and not ctx.compile_only
            and ctx.serial == state.state_serial() and ctx.config_key == _config_key()
            and _same_parameters(getattr(ctx, "parameters_key", None), _parameters_key(state.user_devices()))
            and (output_queue is None or output_queue is ctx.output_queue))


def _place_shortcut(module: Any) -> Device:
    from pybuda.module import Module
    from pybuda.runtime.ttdevice import TTDevice

    if not isinstance(module, Module):
        raise PybudaError(f"run_inference(module=...) expects a pybuda Module, got {type(module).__name__}")
    devices = state.user_devices()
    device = devices[0] if devices else TTDevice("auto_tt0")
    if not (len(device.modules) == 1 and device.modules[0] is module):
        device.remove_modules()
        device.place_module(module)
    return device


def _fits(device: Device, item: InputItem) -> bool:
    target = device.cpu_fallback_device_pre or device
    if target._first_inputs is None:
        return True
    try:
        target.validate_push(item)
        return True
    except InputError:
        return False


def _prevalidate(device: Device, items: Sequence[InputItem]) -> None:
    target = device.cpu_fallback_device_pre or device
    saved = target._first_inputs
    try:
        for item in items:
            checked = target.validate_push(item)
            if target._first_inputs is None:
                target._first_inputs = checked
    finally:
        target._first_inputs = saved


def run_inference(module: Any = None, inputs: Sequence[Any] = (), input_count: int = 1,
                  output_queue: Optional[queue.Queue] = None, _sequential: bool = False, _perf_trace: bool = False,
                  _verify_cfg: Any = None, **legacy: Any) -> queue.Queue:
    """Main "run" function for inference; returns the queue holding one list of outputs per input.

    ``module``: place it (alone) on the first device, creating ``TTDevice("auto_tt0")`` if needed.
    ``inputs``: tuples, dicts (keyword inputs) or single tensors, pushed to the first device.
    ``input_count``: inputs to run (1 or ``len(inputs)`` when ``inputs`` is given; 0 = until shutdown,
    concurrent mode only). ``output_queue``: where outputs go (default: a new :class:`OutputQueue`).
    """
    values = _legacy("run_inference", legacy, {"input_count": input_count, "_sequential": _sequential})
    input_count, _sequential = values["input_count"], values["_sequential"]
    if isinstance(inputs, (torch.Tensor, np.ndarray, Mapping)):
        raise InputError("run_inference(inputs=...) takes a list of inputs (one tuple/dict/tensor per input), "
                         "e.g. inputs=[(x,)] or inputs=[x]")
    items = [normalize_push(tuple(x) if isinstance(x, (tuple, list)) else (x,), "run_inference") for x in inputs]
    if not isinstance(input_count, int) or isinstance(input_count, bool) or input_count < 0:
        raise InputError(f"input_count must be a non-negative int, got {input_count!r}")
    if items:
        if input_count not in (1, len(items)):
            raise InputError(f"input_count={input_count} does not match the {len(items)} input(s) given; pass "
                             f"input_count=1 or {len(items)}")
        input_count = len(items)
    if _perf_trace:
        log.info("run_inference(_perf_trace=True): performance traces come from pybuda.perf.model")
    if module is not None:
        device = _place_shortcut(module)
        if items and not _fits(device, items[0]):
            log.info("inputs changed shape or dtype: recompiling '%s'", module.name)
            context.shutdown_current()
            device.reset_inputs()
    devices = state.user_devices()
    if not devices:
        raise PybudaError("no devices: create a TTDevice or CPUDevice and place a module on it, or pass module=")
    _prevalidate(devices[0], items)  # all or nothing: a bad third input must not leave two queued
    ctx = context.current()
    if _can_resume(ctx, output_queue):
        first = devices[0]
        if items:
            _refuse_queued_inputs(first, ctx.unclaimed_inputs())
        for item in items:
            first.push_to_inputs(_as_push_arg(item))
        ctx.run_forward(input_count)
        return ctx.output_queue
    context.shutdown_current()
    if items:
        _refuse_queued_inputs(devices[0], _queued_inputs(devices[0]))
    for item in items:
        devices[0].push_to_inputs(_as_push_arg(item))
    out_q = initialize_pipeline(False, output_queue=output_queue, _sequential=_sequential, _verify_cfg=_verify_cfg)
    run_forward(input_count)
    return out_q


def _queued_inputs(device: Device) -> int:
    """Inputs waiting in ``device``'s buffer (and its CPU-fallback device's) while no pipeline runs."""
    pre = device.cpu_fallback_device_pre
    return device._staging.qsize() + (pre._staging.qsize() if pre is not None else 0)


def _refuse_queued_inputs(device: Device, queued: int) -> None:
    # The first device runs inputs in push order: earlier pushes would run in place of the inputs given
    # here, and every later output would belong to the input before it.
    if queued:
        raise InputError(f"{queued} input(s) pushed to '{device.name}' earlier are still queued and not run: "
                         f"run_inference(inputs=...) would run them in place of the inputs given, and every "
                         f"later output would be off by one. Run them first (run_inference() without inputs, or "
                         f"run_forward), or drop them with pybuda.shutdown()")


def _as_push_arg(item: InputItem) -> Any:
    return dict(zip(item.names, item.tensors)) if item.names is not None else tuple(item.tensors)


def run_forward(input_count: int = 1, _sequential: bool = False) -> None:
    """Run ``input_count`` pushed inputs through the initialized pipeline (0 = until shutdown; training
    pipelines run exactly ``input_count`` and keep each for its backward)."""
    from pybuda.runtime import training

    session = training.current()
    if session is not None:
        session.forward(input_count)
        return
    ctx = _require_context("run_forward")
    ctx.run_forward(input_count)


def _require_context(func: str) -> RunContext:
    ctx = context.current()
    if ctx is None:
        raise PybudaError(f"{func}: no pipeline is running; call initialize_pipeline or run_inference first")
    return ctx


def sync() -> None:
    """Block until every device has finished the commands sent so far (raises a device's failure)."""
    ctx = context.current()
    if ctx is not None:
        ctx.sync()


def shutdown() -> None:
    """Stop the pipeline: devices finish queued work that has its inputs, then workers exit (busy ones
    are stopped after a time limit). Inputs pushed and not run are dropped, so a later pipeline never
    consumes them. Idempotent; runs at exit (without waiting for queued work)."""
    context.shutdown_current(clear_inputs=True)
    _close_training()
    for d in state.user_devices():  # pushes made while no pipeline ran are dropped too
        for buffered in (d, d.cpu_fallback_device_pre):
            if buffered is not None:
                _drain_buffer(buffered)


def _drain_buffer(device: Device) -> None:
    dropped = 0
    while True:
        try:
            device._staging.get_nowait()
        except queue.Empty:
            break
        dropped += 1
    if dropped:
        log.info("shutdown dropped %d input(s) pushed to '%s' and not run", dropped, device.name)


def error_raised() -> bool:
    """True when a device failure stopped the pipeline (until the next initialize or pybuda_reset)."""
    return context.last_error() is not None


def _pipeline_devices() -> List[Device]:
    ctx = context.current()
    if ctx is not None and not ctx.closed:
        return list(ctx.devices)
    return state.user_devices()


def get_parameter_checkpoint(device: Optional[Device] = None, _sequential: bool = False) -> List[Dict[str, Any]]:
    """Current parameter values: one dict (name -> pybuda Tensor) per device, or for ``device`` only."""
    ctx = context.current()
    if ctx is not None:
        ctx.sync()
    devices = [device] if device is not None else _pipeline_devices()
    return [d.get_parameter_checkpoint() for d in devices]


def update_device_parameters(device: Optional[Device] = None, parameters: Sequence[Mapping[str, Any]] = (),
                             _sequential: bool = False) -> None:
    """Push new parameter values: ``parameters[i]`` goes to device ``i`` (or ``parameters[0]`` to ``device``)."""
    devices = [device] if device is not None else _pipeline_devices()
    if isinstance(parameters, Mapping):
        parameters = [parameters]
    if len(parameters) != len(devices):
        raise InputError(f"update_device_parameters: got {len(parameters)} parameter dict(s) for {len(devices)} "
                         f"device(s) {[d.name for d in devices]}")
    for d, params in zip(devices, parameters):
        d.update_device_parameters(params)


def detect_available_devices():
    """Archs of the Tenstorrent cards pybuda can run on: the one simulated card (never silicon; see
    :func:`pybuda.runtime.ttdevice.detect_available_devices`)."""
    from pybuda.runtime.ttdevice import detect_available_devices as detect

    return detect()


def set_device_pipeline(devices: Sequence[Device]) -> None:
    """Run the given devices in this order (instead of creation order)."""
    state.set_device_pipeline(devices)


def pybuda_reset() -> None:
    """Shut down, forget every device, and reset the compiler configuration."""
    context.shutdown_current(clear_inputs=True)
    _close_training()
    for d in state.user_devices():
        for m in list(d.modules):
            if m.get_device() is d:
                m._set_device(None)
    state.clear_devices()
    _clear_global_compiler_config()
    context.clear_error()


# --- training ------------------------------------------------------------------------------------------------
def _close_training() -> None:
    from pybuda.runtime import training

    training.close()


def _training_session(func: str) -> Any:
    from pybuda.runtime import training

    session = training.current()
    if session is None:
        raise PybudaError(f"{func}: no training pipeline is running; call initialize_pipeline(training=True) or "
                          f"run_training first")
    return session


def _positive(func: str, **counts: Any) -> None:
    for name, value in counts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{func}: {name} must be a positive int, got {value!r}")


def run_training(epochs: int = 1, steps: int = 1, accumulation_steps: int = 1, microbatch_count: int = 1,
                 checkpoint_queue: Any = None, loss_queue: Any = None, checkpoint_interval: int = 0,
                 _sequential: bool = False, _perf_trace: bool = False, _verify_cfg: Any = None) -> queue.Queue:
    """Main "run" function for training; returns the checkpoint queue.

    For each epoch, each step: ``accumulation_steps`` times ``run_forward(microbatch_count)`` then
    ``run_backward(microbatch_count, zero_grad=<first accumulation step>)``, then ``run_optimizer``. Every
    ``checkpoint_interval`` optimizer steps (0: never) a checkpoint (one dict of parameters per device) goes to
    ``checkpoint_queue``, and a last one at the end; schedulers step at the end of each epoch. ``loss_queue``
    receives the loss of every microbatch. All ``epochs * steps * accumulation_steps * microbatch_count``
    inputs (and targets) must be pushed first: a missing one is an InputError before anything runs.
    """
    _positive("run_training", epochs=epochs, steps=steps, accumulation_steps=accumulation_steps,
              microbatch_count=microbatch_count)
    if not isinstance(checkpoint_interval, int) or isinstance(checkpoint_interval, bool) or checkpoint_interval < 0:
        raise InputError(f"run_training: checkpoint_interval must be a non-negative int, got {checkpoint_interval!r}")
    from pybuda.runtime import training

    checkpoint_queue = checkpoint_queue if checkpoint_queue is not None else OutputQueue()
    session = training.current()
    if session is None:
        initialize_pipeline(True, checkpoint_queue=checkpoint_queue, microbatch_count=microbatch_count,
                            _verify_cfg=_verify_cfg)
        session = training.current()
    session.checkpoint_queue = checkpoint_queue
    session.loss_queue = loss_queue if loss_queue is not None else session.loss_queue
    session.require_inputs(epochs * steps * accumulation_steps * microbatch_count, "run_training")
    for _ in range(epochs):
        for _ in range(steps):
            for acc in range(accumulation_steps):
                session.forward(microbatch_count)
                session.backward(microbatch_count, zero_grad=acc == 0)
            session.optimizer(checkpoint=checkpoint_interval > 0 and
                              (session.optimizer_steps + 1) % checkpoint_interval == 0)
        session.schedulers()
    checkpoint_queue.put(session.checkpoint())
    return checkpoint_queue


def run_backward(input_count: int = 1, zero_grad: bool = False, _sequential: bool = False) -> None:
    """Run the backward of the ``input_count`` oldest forwards (``zero_grad``: clear the accumulated
    gradients first). Each needs its ``run_forward``; a backward without one is an error."""
    _training_session("run_backward").backward(input_count, zero_grad)


def run_optimizer(checkpoint: bool = False, _sequential: bool = False) -> None:
    """One optimizer step on every device over the accumulated gradients; ``checkpoint`` also pushes the new
    parameters to the checkpoint queue."""
    _training_session("run_optimizer").optimizer(checkpoint)


def run_schedulers(_sequential: bool = False) -> None:
    """Step every device's learning-rate scheduler (the new rate reaches the device without a recompile)."""
    _training_session("run_schedulers").schedulers()


def get_parameter_gradients(device: Optional[Device] = None, _sequential: bool = False) -> List[Dict[str, Any]]:
    """Accumulated gradients: one dict (name -> pybuda Tensor) per device, or for ``device`` only."""
    session = _training_session("get_parameter_gradients")
    devices = [device] if device is not None else [t.device for t in session.user_trainers()]
    return [d.get_parameter_gradients() for d in devices]


def get_loss_queue() -> Any:
    """The queue receiving each microbatch's loss in the running training pipeline (None otherwise)."""
    from pybuda.runtime import training

    session = training.current()
    return session.loss_queue if session is not None else None


def get_intermediates_queue() -> Any:
    """The queue receiving the values of tapped ops (``op_intermediates_to_save``,
    ``PyBudaModule.insert_tapout_queue_for_op``) of the running pipeline, None when no pipeline runs.

    Each input run through a TTDevice that saves intermediates adds one
    :class:`~pybuda.runtime.transport.Intermediates`: a list of pybuda Tensors in tap order, also indexable
    by op name or tap-out handle."""
    ctx = context.current()
    return ctx.intermediates_queue if ctx is not None and not ctx.closed else None


def get_checkpoint_queue() -> Any:
    """The checkpoint queue of the running training pipeline (None otherwise)."""
    from pybuda.runtime import training

    session = training.current()
    return session.checkpoint_queue if session is not None else None


def is_silicon() -> bool:
    """Whether the current devices are real Tenstorrent silicon: never, pybuda simulates the chips (a
    TTDevice asked for ``BackendType.Silicon`` runs on the golden backend)."""
    from pybuda.runtime.ttdevice import silicon_present

    return silicon_present()


def run_generative_inference(module: Any = None, inputs: Sequence[Any] = (), input_count: int = 1,
                             output_queue: Optional[queue.Queue] = None, _sequential: bool = False,
                             _perf_trace: bool = False, _verify_cfg: Any = None) -> queue.Queue:
    """TT-Buda's generative variant of :func:`run_inference`, same arguments and result.

    TT-Buda used it for graphs with past-cache buffers written in place between tokens. Compiled graphs here
    have no cache buffers (a decoder gets its cache as ordinary inputs and returns it as outputs), so each
    call is a :func:`run_inference`: a generation loop pushes the next token with the returned cache."""
    return run_inference(module, inputs, input_count, output_queue, _sequential=_sequential, _perf_trace=_perf_trace,
                         _verify_cfg=_verify_cfg)


def run_generate(input_count: int = 1, write_index: int = -1, tokens_per_iter: int = -1, token_id: int = -1,
                 _sequential: bool = False) -> None:
    """TT-Buda's forward run with past-cache pointer management: ``write_index >= 0``, or both
    ``tokens_per_iter > 0`` and ``token_id >= 0``, say where the cache is written.

    The arguments are checked as TT-Buda did. Compiled graphs here have no in-place cache buffers (see
    :func:`run_generative_inference`), so there is no pointer to move and the inputs run as
    :func:`run_forward`."""
    if write_index < 0 and not (tokens_per_iter > 0 and token_id >= 0):
        raise InputError(f"run_generate needs write_index >= 0, or tokens_per_iter > 0 and token_id >= 0; got "
                         f"write_index={write_index}, tokens_per_iter={tokens_per_iter}, token_id={token_id}")
    run_forward(input_count)