"""Running a loaded :class:`~pybuda.tti.image.TTDeviceImage`: the device side of ``TTDevice.load_image``.

A loaded device holds one :class:`ImageModule` per compiled module. At pipeline start it does not compile:
:func:`image_artifact` builds the runtime's :class:`~pybuda.runtime.backend_api.CompiledArtifact` straight
from the image — a golden executor per module on its netlist, host-I/O record and tensors — and the CPU
stages of a split model become CPU-fallback devices around it (:mod:`pybuda.runtime.stages`), as after a
compile. Pushes are checked against the image's recorded input shapes and dtypes.
"""

from __future__ import annotations

from typing import Any, List, Optional

import torch

from pybuda.errors import ImageError, InputError
from pybuda.module import Module
from pybuda.ops.common import torch_dtype
from pybuda.tti.image import ImageStage, TTDeviceImage


class ImageModule(Module):
    """A module compiled into a device image: runs from the image's data, never traced or captured."""

    def __init__(self, stage: ImageStage, image: TTDeviceImage):
        super().__init__(stage.module_name)
        # Module.__init__ may add a graph-name suffix; keep the compiled module's name.
        object.__setattr__(self, "name", stage.module_name)
        self.stage = stage
        self.image = image


def image_modules(modules: List[Any]) -> Optional[TTDeviceImage]:
    """The image the modules come from when they all are :class:`ImageModule`\\ s; None when none is one;
    an error when a device mixes them with other modules."""
    loaded = [m for m in modules if isinstance(m, ImageModule)]
    if not loaded:
        return None
    if len(loaded) != len(modules):
        raise ImageError("a device that runs a loaded image cannot hold other modules as well")
    return loaded[0].image


def check_push(image: TTDeviceImage, tensors: List[torch.Tensor], device_name: str) -> None:
    """A push to a loaded device must have the recorded count, shapes and dtypes (the image cannot recompile)."""
    if len(tensors) != len(image.inputs):
        raise InputError(f"TTDevice '{device_name}' runs image '{image.device_image_name}', which takes "
                         f"{len(image.inputs)} input(s) {[r.name for r in image.inputs]}; got {len(tensors)}")
    for rec, t in zip(image.inputs, tensors):
        if tuple(t.shape) != tuple(rec.shape):
            raise InputError(f"TTDevice '{device_name}': input '{rec.name}' has shape {list(t.shape)}; the image was "
                             f"compiled for {list(rec.shape)} (dim 0 is the microbatch) and cannot recompile")
        if t.dtype != torch_dtype(rec.dtype):
            raise InputError(f"TTDevice '{device_name}': input '{rec.name}' has dtype {t.dtype}; the image was "
                             f"compiled for {rec.dtype}")


def image_artifact(image: TTDeviceImage, fast: Optional[bool] = None) -> Any:
    """The runtime artifact of a loaded image: one golden executor per compiled module, chained.

    ``fast``: plain float32 golden (default: as the image's compile was configured).
    """
    from pybuda.golden.executor import GoldenExecutor, golden_numerics
    from pybuda.runtime.backend_api import CompiledArtifact, CompiledStage, TensorSpec, batched_shape

    numerics = golden_numerics(image.compiler_cfg)
    if fast is not None:
        numerics["fast"] = fast
    mb = image.microbatch_size
    stages = []
    for stage in image.stages:
        executor = GoldenExecutor(stage.netlist, stage.host_io, stage.tensors, **numerics)
        stages.append(CompiledStage(stage.module_name, None, None, executor, list(stage.input_names)))
    outputs = image.stages[-1].host_io.outputs
    output_specs = [TensorSpec(rec.name, batched_shape(rec.framework_shape, mb), torch_dtype(rec.dtype))
                    for rec in outputs]
    input_specs = [TensorSpec(r.name, tuple(r.shape), torch_dtype(r.dtype)) for r in image.inputs]

    def sample_outputs() -> List[torch.Tensor]:
        # Shapes and dtypes are what the next device compiles for; the values do not matter.
        return [torch.zeros(s.shape, dtype=s.dtype) for s in output_specs]

    return CompiledArtifact(stages, input_specs, output_specs, mb, "golden", sample_outputs)


def random_inputs(image: TTDeviceImage, seed: int = 0) -> List[torch.Tensor]:
    """One push of random inputs of the image's recorded shapes and dtypes: floats from a normal
    distribution, integers 0 or 1 (valid token ids, masks and type ids whatever the vocabulary), bools."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for rec in image.inputs:
        dtype = torch_dtype(rec.dtype)
        if dtype.is_floating_point:
            out.append(torch.randn(rec.shape, generator=gen).to(dtype))
        elif dtype == torch.bool:
            out.append(torch.randint(0, 2, rec.shape, generator=gen).bool())
        else:
            out.append(torch.randint(0, 2, rec.shape, generator=gen, dtype=dtype))
    return out


def estimate_image(image: TTDeviceImage, microbatch: Optional[int] = None) -> List[Any]:
    """The performance model's report for each compiled module of ``image``, on the image's card, with the
    placer's temporal epochs the image recorded (the same figures as for the compile that wrote it)."""
    from pybuda.perf.model import estimate

    return [estimate(stage.netlist, image.device, microbatch=microbatch, temporal_epochs=stage.temporal_epochs or None)
            for stage in image.stages]


def image_build(image: TTDeviceImage, stage: int = 0) -> Any:
    """The backend build stored for compiled module ``stage`` (:class:`pybuda.backend_build.build.BackendBuild`:
    descriptors, per-epoch pipes with their NoC routes, streams and kernels), read from the image's files."""
    from pybuda.backend_build.build import BackendBuild

    return BackendBuild.from_files(image.stages[stage].backend_build)
