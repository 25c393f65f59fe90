"""From a compiled TTDevice to a :class:`~pybuda.tti.image.TTDeviceImage` (what ``compile_to_image`` saves).

Everything is taken from the device's compile: per module the netlist, the host-I/O record and its tensors
(:func:`pybuda.golden.executor.executor_inputs`, the very inputs the golden executor reads), the placer's
temporal epochs and the backend build; the CPU-fallback devices the pipeline put around a split PyTorch
model become CPU stages as data. The model's Python objects are not stored.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Dict, List, Optional, Tuple

import torch

from pybuda.errors import ImageError, PybudaError
from pybuda.ops.common import dtype_name
from pybuda.tti.image import IMAGE_VERSION, CpuStage, ImageStage, TensorRecord, TTDeviceImage


def image_from_device(device: Any, *, training: bool = False, microbatch_count: int = 1,
                      verify_cfg: Any = None) -> TTDeviceImage:
    """The image of ``device``, a TTDevice whose pipeline was initialised (compiled)."""
    from pybuda.config import read_env
    from pybuda.perf.model import placer_temporal_epochs

    if training:
        raise PybudaError("training images need training, which pybuda does not support yet")
    artifact = getattr(device, "_artifact", None)
    if artifact is None:
        raise PybudaError(f"TTDevice '{device.name}' is not compiled; compile_to_image compiles it first")
    stages = []
    desc = None
    for stage in artifact.stages:
        results = stage.compile_results
        if results is None or getattr(results, "netlist", None) is None:
            raise ImageError(f"module '{stage.module_name}' on TTDevice '{device.name}' has no netlist "
                             f"(compile depth below FULL, or a devtype that does not compile): nothing to store")
        from pybuda.golden.executor import executor_inputs

        netlist, host_io, tensors = executor_inputs(results)
        desc = results.device
        epochs = placer_temporal_epochs(results) or {}
        stages.append(ImageStage(stage.module_name, netlist, host_io, dict(tensors), list(stage.input_names),
                                 epochs, _backend_build(netlist, results.device, epochs)))
    sample = _user_sample(device)
    mb = int(artifact.microbatch)
    pre = _cpu_stage(device.cpu_fallback_device_pre, "pre")
    post = _cpu_stage(device.cpu_fallback_device_post, "post")
    inputs = [TensorRecord(name, tuple(t.shape), dtype_name(t.dtype)) for name, t in sample]
    outputs = _output_records(stages[-1], post, mb)
    rows = desc.harvested_noc_rows
    return TTDeviceImage(
        version=IMAGE_VERSION, device_image_name=device.name, arch=device.arch,
        devtype=device.requested_devtype or device.devtype, chip_ids=list(device.chip_ids),
        fp32_fallback=device.fp32_fallback, microbatch_size=mb, microbatch_count=max(1, int(microbatch_count)),
        grid_size=[desc.grid_rows, desc.grid_cols], harvested_rows=sum(1 << r for r in rows), device=desc,
        stages=stages, inputs=inputs, outputs=outputs,
        compiler_cfg=artifact.stages[0].compile_results.config.to_dict(),
        runtime_env=_jsonable(dataclasses.asdict(read_env())), verify_cfg=_jsonable_dataclass(verify_cfg),
        module_name_to_metadata={m.name: {"module": m.name, "class": type(m).__name__, "module_file_path": None}
                                 for m in device.modules},
        cpu_pre=pre, cpu_post=post)


def _backend_build(netlist: Any, device: Any, epochs: Dict[str, int]) -> Dict[str, str]:
    from pybuda.backend_build.build import build

    return build(netlist, device, temporal_epochs=epochs or None).files()


def _user_sample(device: Any) -> List[Tuple[str, torch.Tensor]]:
    """The compile sample as the user pushed it (to the CPU pre device when the model was split)."""
    item = None
    pre = device.cpu_fallback_device_pre
    if pre is not None:
        item = pre.first_input_item()
    if item is None:
        item = device.first_input_item()
    if item is None:
        raise PybudaError(f"TTDevice '{device.name}' has no compile sample")
    names = item.names or tuple(f"input_{i}" for i in range(len(item.tensors)))
    return list(zip(names, item.tensors))


def _cpu_stage(cpu_device: Any, side: str) -> Optional[CpuStage]:
    if cpu_device is None:
        return None
    from pybuda.frontend.fx_serde import stage_to_data

    module = cpu_device.modules[0]
    model_bytes = getattr(module.fn, "model_bytes", None)
    if isinstance(model_bytes, bytes):  # an ONNX model's stage: its ONNX subgraph is the data
        return CpuStage(module.name, {}, {}, [tuple(s) for s in module.per_sample_shapes], onnx_model=model_bytes)
    data, tensors = stage_to_data(module.fn, module.name)
    return CpuStage(module.name, data, dict(tensors), [tuple(s) for s in module.per_sample_shapes])


def _output_records(last: ImageStage, post: Optional[CpuStage], mb: int) -> List[TensorRecord]:
    """What one push returns: the device outputs, or what the CPU post stage makes of them."""
    from pybuda.ops.common import torch_dtype
    from pybuda.runtime.backend_api import batched_shape

    device_outputs = [(rec.name, batched_shape(rec.framework_shape, mb), rec.dtype) for rec in last.host_io.outputs]
    if post is None:
        return [TensorRecord(n, tuple(s), d) for n, s, d in device_outputs]
    # The post stage's output shapes: one run on zeros of one sample (cheap: it is the tail of the model).
    with torch.no_grad():
        zeros = [torch.zeros(tuple(rec.framework_shape), dtype=torch_dtype(rec.dtype)) for rec in last.host_io.outputs]
        outs = post.function()(*zeros)
    outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
    return [TensorRecord(f"output_{i}", batched_shape(tuple(t.shape), mb), dtype_name(t.dtype))
            for i, t in enumerate(outs)]


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _jsonable_dataclass(value: Any) -> Optional[Dict[str, Any]]:
    if value is None or not dataclasses.is_dataclass(value):
        return None
    return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
            if not callable(getattr(value, f.name))}

