"""Translating framework modules before a pipeline starts (TT-Buda's
``_translate_framework_modules_on_devices``), including the automatic CPU-fallback devices.

A PyTorch module placed on a TTDevice is captured by the torch frontend
(:func:`pybuda.frontend.torch.capture`) for one sample of the device's first push. The frontend may
split it into ``(pre, device_graph, post)``: ``pre``/``post`` are CPU callables. Each becomes a
:class:`CPUDevice` (``cpu<i>_fallback``) inserted into the pipeline before/after the TTDevice:

* pushes to the TTDevice are redirected to the pre device (``cpu_fallback_device_pre``), and inputs
  already queued on the TTDevice move there;
* the TTDevice compiles the device graph (a :class:`~pybuda.compile.CapturedGraphModule`) instead of
  re-capturing: a model is captured once (:func:`pybuda.compile.module_to_graph`), and nothing runs on
  the CPU here (the CPU devices' per-sample shapes come from the captured graph).

Fallback devices are not registered as user devices: they are rebuilt at every initialization, and
``set_device_pipeline``/creation order only ever lists the user's devices.

The captured stages have static per-sample shapes, so CPU fallback stages run once per sample of a
microbatch, like the device graph (see :mod:`pybuda.runtime.backend_api`).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

from pybuda.tensor import as_tuple
from pybuda.errors import CompileError
from pybuda.module import Module, OnnxModule, PyTorchModule
from pybuda.runtime import state
from pybuda.runtime.backend_api import fold_microbatch, split_microbatch
from pybuda.runtime.device import Device

log = logging.getLogger(__name__)


class CpuFallbackModule(Module):
    """A CPU stage of a split framework model: ``fn(*tensors) -> tuple`` run once per sample.

    ``per_sample_shapes`` are the stage's input shapes at capture (one sample); pushes carrying a
    microbatch are cut into samples and the outputs joined again along dim 0.
    """

    def __init__(self, name: str, fn: Callable[..., Any], per_sample_shapes: Sequence[Sequence[int]]):
        super().__init__(name)
        self.fn = fn
        self.per_sample_shapes = [tuple(s) for s in per_sample_shapes]

    def forward(self, *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        samples = split_microbatch(list(tensors), self.per_sample_shapes, f"CPU fallback stage '{self.name}'")
        with torch.no_grad():
            outs = [list(as_tuple(self.fn(*s))) for s in samples]
        return tuple(fold_microbatch(outs))


def undo_translation(device: Device) -> None:
    """Detach fallback devices from a previous initialization; queued inputs come back to ``device``."""
    pre = device.cpu_fallback_device_pre
    if pre is not None:
        while True:
            try:
                device._staging.put(pre._staging.get_nowait())
            except Exception:
                break
        if device._first_inputs is None:
            device._first_inputs = pre._first_inputs
    device.cpu_fallback_device_pre = None
    device.cpu_fallback_device_post = None
    device._translated_modules = None


def translate_pipeline(devices: Sequence[Device], config: Any) -> List[Device]:
    """The pipeline to run: the user's devices, with CPU-fallback devices around split TTDevices."""
    from pybuda.runtime.ttdevice import TTDevice

    pipeline: List[Device] = []
    counter = [0]
    for d in devices:
        undo_translation(d)
        image = d.loaded_image if isinstance(d, TTDevice) else None
        if image is not None and (image.cpu_pre is not None or image.cpu_post is not None):
            pre, post = _translate_image(d, image, counter)
            pipeline.extend(x for x in (pre, d, post) if x is not None)
        elif isinstance(d, TTDevice) and any(_framework_module(m) for m in d.modules):
            pre, post = _translate_tt(d, config, counter)
            pipeline.extend(x for x in (pre, d, post) if x is not None)
        else:
            pipeline.append(d)
    return pipeline


def _translate_image(device: Device, image: Any, counter: List[int]) -> Tuple[Optional[Device], Optional[Device]]:
    """CPU-fallback devices around a TTDevice that runs a loaded image, from the image's CPU stages."""
    devices = []
    for stage in (image.cpu_pre, image.cpu_post):
        if stage is None:
            devices.append(None)
            continue
        devices.append(_fallback_device(CpuFallbackModule(stage.name, stage.function(), stage.per_sample_shapes),
                                        counter))
    _attach_fallback(device, devices[0], devices[1], device._first_inputs)
    return devices[0], devices[1]


def _fallback_device(module: "CpuFallbackModule", counter: List[int]) -> Device:
    """A CPU-fallback device (not a user device) running ``module``."""
    from pybuda.runtime.cpudevice import CPUDevice

    with state.unregistered():
        dev = CPUDevice(f"cpu{counter[0]}_fallback", module=module)
    # A stage runs the model's own ops on the dtypes it was captured with: a bfloat16 model's stage holds
    # bfloat16 weights and constants, which float32 inputs would not multiply, and its outputs must come
    # back in the model's dtype.
    dev.upcast_low_precision = False
    counter[0] += 1
    return dev


def _attach_fallback(device: Device, pre_dev: Optional[Device], post_dev: Optional[Device], sample: Any) -> None:
    """Put ``pre_dev``/``post_dev`` around ``device``: pushes and queued inputs move to the pre device."""
    if pre_dev is not None:
        pre_dev._first_inputs = sample
        while True:
            try:
                pre_dev._staging.put(device._staging.get_nowait())
            except Exception:
                break
        pre_dev._fallback_of = device
        device.cpu_fallback_device_pre = pre_dev
    if post_dev is not None:
        post_dev._fallback_of = device
        device.cpu_fallback_device_post = post_dev
    if pre_dev is not None or post_dev is not None:
        log.info("TTDevice '%s' runs with CPU fallback: %s", device.name,
                 " -> ".join(d.name for d in (pre_dev, device, post_dev) if d is not None))


def _translate_tt(device: Device, config: Any, counter: List[int]) -> Tuple[Optional[Device], Optional[Device]]:
    from pybuda.compile import CapturedGraphModule, module_to_graph
    from pybuda.ops.integer import target_arch

    sample = device._first_inputs
    if sample is None:
        return None, None  # reported by initialize_pipeline (no sample)
    # One framework module is captured for the whole push (dim 0 = the microbatch), so that the compile
    # sees statically which ops read across samples (backend_api.trace_whole_push); chains for one sample.
    # An ONNX model with a dynamic batch binds it to the push's, as torch.export traces at the push's batch.
    mb = sample.microbatch
    from pybuda.runtime.data_parallel import data_parallel_requested

    # Data parallel compiles for half a push; training compiles forward and backward for one sample.
    whole = mb > 1 and len(device.modules) == 1 and isinstance(device.modules[0], (PyTorchModule, OnnxModule)) \
        and not data_parallel_requested() and not getattr(device, "training", False)
    # A model exported with a static batch (ONNX) takes the whole push as one run; a push of any other size gets
    # the frontend's shape error against what the user pushed.
    whole = whole or (len(device.modules) == 1 and getattr(device.modules[0], "static_batch", None) is not None
                      and not getattr(device, "training", False))
    values = list(sample.tensors) if whole else [t[0:1] if t.dim() else t for t in sample.tensors]
    names = sample.names
    translated: List[Module] = []
    pre_dev = post_dev = None
    # The previous module's graph, whose sample outputs are the next module's sample inputs: traced or
    # run only when a later module on this device needs them.
    previous: Optional[Callable[[], Any]] = None
    for module in device.modules:
        if previous is not None:
            values, names = list(previous().graph_outputs), None
        if not _framework_module(module):
            translated.append(module)
            previous = _once(module_to_graph, module, values, names)
            continue
        if not whole and previous is None and sample.tensors and sample.tensors[0].dim():
            from pybuda.runtime.backend_api import check_samples_independent

            check_samples_independent(module, sample.tensors, int(sample.tensors[0].shape[0]))
        with target_arch(getattr(device, "arch", None)):  # what the chip keeps exact decides what runs there
            captured = module_to_graph(module, values, names, graph_name=module.name, config=config,
                                       for_device=True, allow_cpu_stages=True,
                                       training=bool(getattr(device, "training", False)))
        pre, graph, post = captured.pre, captured.graph, captured.post
        if (pre is not None or post is not None) and len(device.modules) > 1:
            raise CompileError(f"TTDevice '{device.name}': module '{module.name}' needs CPU fallback, which is only "
                               f"possible when it is the only module on its device", stage="GENERATE_INITIAL_GRAPH")
        if pre is not None:
            pre_dev = _fallback_device(CpuFallbackModule(f"{module.name}_cpu_pre", pre,
                                                         [t.shape for t in captured.flat_inputs]), counter)
        graph.whole_push = whole
        translated.append(CapturedGraphModule(module.name, graph))
        if post is not None:
            # The device graph's per-sample output shapes, from the graph rather than from running it.
            post_dev = _fallback_device(CpuFallbackModule(f"{module.name}_cpu_post", post,
                                                          [tuple(n.shape) for n in graph.outputs]), counter)
        previous = _once(lambda c: c, captured)
    device._translated_modules = translated
    _attach_fallback(device, pre_dev, post_dev, sample)
    return pre_dev, post_dev


def _framework_module(module: Any) -> bool:
    """A module a frontend captures (PyTorch, ONNX, JAX ...): its capture may split off CPU stages."""
    return bool(getattr(module, "runs_natively_on_cpu", True)) and hasattr(module, "to_graph")


def _once(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """``fn(*args)``, called on first use only."""
    done: List[Any] = []

    def get() -> Any:
        if not done:
            done.append(fn(*args))
        return done[0]
    return get
