"""``TTDeviceImage``: a compiled TTDevice as data — saved once, loaded anywhere, run without the model's code.

An image holds, per module compiled on the device, the netlist, its host-I/O record
(:class:`pybuda.netlist.host_io.HostIO`) and the tensors that record names — exactly what the golden
executor reads — plus the CPU-fallback stages of a split PyTorch model as data
(:mod:`pybuda.frontend.fx_serde`) and the backend build (:mod:`pybuda.backend_build`: device and cluster
descriptors, per-epoch pipes, streams and kernels). The file format is in :mod:`pybuda.tti.archive`.

Loading parses everything with strict readers (JSON, ``yaml.safe_load`` through the netlist parser,
safetensors) and checks that the parts agree; a problem is an :class:`~pybuda.errors.ImageError`. No pickles,
no module files: a process that cannot import the model runs the image (``TTDevice.load_image``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

import pybuda
from pybuda.arch.descriptor import DeviceDescriptor, harvested_noc_rows
from pybuda.arch.types import BackendDevice, BackendType
from pybuda.dtypes import DataFormat
from pybuda.errors import ConfigError, ImageError, NetlistError
from pybuda.netlist.host_io import HostIO
from pybuda.paths import safe_file_name
from pybuda.tti.archive import DEFAULT_MAX_BYTES, MANIFEST, read_archive, write_archive

log = logging.getLogger(__name__)

__all__ = ["TTDeviceImage", "ImageStage", "CpuStage", "TensorRecord", "IMAGE_VERSION"]

#: Version of the image layout. Images of another major.minor are refused; the patch level may differ.
IMAGE_VERSION = "1.0.0"
#: TT-Buda's name for it.
TTI_VERSION = IMAGE_VERSION
BUILD_DIR = "backend_build_binaries"


# --- parts ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorRecord:
    """Name, full-push shape (dim 0 holds the microbatch) and dtype of one device input or output."""

    name: str
    shape: Tuple[int, ...]
    dtype: str

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass
class ImageStage:
    """One module compiled on the device: its netlist, host-I/O record and tensors (all a backend reads)."""

    module_name: str
    netlist: Any  # pybuda.netlist.Netlist
    host_io: HostIO
    tensors: Dict[str, torch.Tensor]
    #: Graph input names, in push order.
    input_names: List[str] = field(default_factory=list)
    #: Netlist graph -> temporal epoch (the placer's), for the performance model and the backend build.
    temporal_epochs: Dict[str, int] = field(default_factory=dict)
    #: The backend build of this module's netlist: relative path -> text. Running needs none of it, so a
    #: loaded image parses it (strictly) only when asked: :func:`pybuda.tti.load.image_build`.
    backend_build: Dict[str, str] = field(default_factory=dict)


@dataclass
class CpuStage:
    """A CPU-fallback stage as data: of a split PyTorch model (:mod:`pybuda.frontend.fx_serde`), or of an
    ONNX model (``onnx_model``: the stage's serialized ONNX subgraph, run by ONNX Runtime; ``data`` and
    ``tensors`` are then empty, the initializers live inside the ONNX bytes)."""

    name: str
    data: Dict[str, Any]
    tensors: Dict[str, torch.Tensor]
    #: Per-sample input shapes (the stage runs once per sample of a microbatch).
    per_sample_shapes: List[Tuple[int, ...]]
    onnx_model: Optional[bytes] = None

    @property
    def format(self) -> str:
        """``"onnx"`` or ``"fx"``: how the stage is stored."""
        return "onnx" if self.onnx_model is not None else "fx"

    def function(self) -> Callable[..., Any]:
        """The stage as a callable, rebuilt from data (only allow-listed torch ops, or an ONNX model for ONNX
        Runtime; no code from the file)."""
        if self.onnx_model is not None:
            from pybuda.frontend.onnx.stages import OnnxStage

            try:
                return OnnxStage.from_bytes(self.name, self.onnx_model)
            except ValueError as e:
                raise ImageError(f"CPU stage '{self.name}': the stored ONNX model is invalid: {e}") from None
        from pybuda.frontend.fx_serde import stage_from_data

        return stage_from_data(self.data, self.tensors)


# --- the image --------------------------------------------------------------------------------------------------


@dataclass
class TTDeviceImage:
    """A compiled TTDevice (TT-Buda's TTDeviceImage fields, reference §5), plus what runs it.

    Create one with :meth:`pybuda.TTDevice.compile_to_image`; load one with :meth:`load_from_disk` and run it with
    :meth:`pybuda.TTDevice.load_image`, then ``push_to_inputs`` and ``run_inference`` as after a compile.
    """

    version: str
    device_image_name: str
    arch: BackendDevice
    devtype: BackendType
    chip_ids: List[Any]
    fp32_fallback: DataFormat
    microbatch_size: int
    microbatch_count: int
    grid_size: List[int]
    #: TT-Buda's form: a bitmask of harvested NoC rows (rows 1 and 11 -> 2050).
    harvested_rows: int
    device: DeviceDescriptor
    stages: List[ImageStage]
    inputs: List[TensorRecord]
    outputs: List[TensorRecord]
    compiler_cfg: Dict[str, Any] = field(default_factory=dict)
    runtime_env: Dict[str, Any] = field(default_factory=dict)
    verify_cfg: Optional[Dict[str, Any]] = None
    training: bool = False
    optimizer: Optional[Dict[str, Any]] = None
    loss_module: Optional[str] = None
    module_name_to_metadata: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    cpu_pre: Optional[CpuStage] = None
    cpu_post: Optional[CpuStage] = None
    pybuda_pip_version_id: str = pybuda.__version__
    pybuda_commit_hash: str = ""
    budabackend_commit_hash: str = "pybuda-golden"

    # --- the reference's accessors -------------------------------------------------------------------------
    @property
    def modules(self) -> List[str]:
        """Names of the modules compiled into the image."""
        return [s.module_name for s in self.stages]

    def get_input_shapes(self) -> List[Tuple[int, ...]]:
        """Shapes of the tensors to push (dim 0 is the microbatch), in push order."""
        return [tuple(r.shape) for r in self.inputs]

    def get_output_shapes(self) -> List[Tuple[int, ...]]:
        """Shapes of the outputs one push produces, in order."""
        return [tuple(r.shape) for r in self.outputs]

    def get_target_shapes(self) -> List[Tuple[int, ...]]:
        """Target shapes (training images only; none for inference)."""
        return []

    def get_input_dtypes(self) -> List[torch.dtype]:
        """Dtypes of the tensors to push, in push order."""
        from pybuda.ops.common import torch_dtype

        return [torch_dtype(r.dtype) for r in self.inputs]

    def is_compiled_for_training(self) -> bool:
        return self.training

    def info(self, file: Any = None) -> str:
        """Print (and return) the image's description, as TT-Buda's ``info()``."""
        rows = harvested_noc_rows(self.arch, self.device.harvesting_mask)
        lines = [
            "Image Info...",
            "  - Version Info:",
            f"    - image_version: {self.version}",
            f"    - pybuda_version: {self.pybuda_pip_version_id}",
            f"    - pybuda_commit: {self.pybuda_commit_hash or 'unknown'}",
            f"    - buda_backend_commit: {self.budabackend_commit_hash}",
            f"  - Device Name: {self.device_image_name}",
            "",
            "Device Info...",
            f"  - arch: {self.arch}",
            f"  - card: {self.device.name} ({self.device.chip_count} chip(s))",
            f"  - chip_ids: {self.chip_ids}",
            f"  - backend device type: {self.devtype} (runs on the simulated chip)",
            f"  - grid size: {self.grid_size}",
            f"  - harvested rows: {self.harvested_rows if rows else 'None'}"
            + (f" (NoC rows {list(rows)})" if rows else ""),
            "",
            "Compilation Graph State...",
            f"  - training: {self.training}",
            f"  - modules: {self.modules}",
            f"  - microbatch size: {self.microbatch_size}, microbatch count: {self.microbatch_count}",
            f"  - ordered input shapes: {[list(s) for s in self.get_input_shapes()]}",
            f"  - ordered output shapes: {[list(s) for s in self.get_output_shapes()]}",
            f"  - ordered targets shapes: {[list(s) for s in self.get_target_shapes()]}",
            f"  - CPU fallback stages: {[s.name for s in (self.cpu_pre, self.cpu_post) if s is not None] or 'None'}",
        ]
        text = "\n".join(lines)
        print(text, file=file if file is not None else sys.stdout)
        return text

    # --- saving ---------------------------------------------------------------------------------------------
    def to_files(self) -> Dict[str, bytes]:
        """The image as archive members (relative path -> bytes), without the manifest."""
        files: Dict[str, bytes] = {}
        stages = []
        used: Dict[str, int] = {}
        for stage in self.stages:
            base = _unique(safe_file_name(stage.module_name), used)
            netlist_file = f"{base}_netlist.yaml"
            tensors_file = f"tensors/{base}.safetensors"
            files[netlist_file] = _netlist_text(stage.netlist).encode()
            skip = _folded_copies(stage.host_io)
            files[tensors_file] = _save_tensors({k: v for k, v in stage.tensors.items() if k not in skip},
                                                f"module '{stage.module_name}'")
            build_dir = f"{BUILD_DIR}/{base}"
            for rel, text in stage.backend_build.items():
                files[f"{build_dir}/{rel}"] = text.encode()
            stages.append({"module": stage.module_name, "netlist": netlist_file, "tensors": tensors_file,
                           "host_io": stage.host_io.to_dict(), "input_names": list(stage.input_names),
                           "temporal_epochs": dict(stage.temporal_epochs), "backend_build": build_dir,
                           "backend_build_files": sorted(stage.backend_build)})
        cpu = {}
        for side, cs in (("pre", self.cpu_pre), ("post", self.cpu_post)):
            if cs is None:
                continue
            base = _unique(safe_file_name(cs.name), used)
            if cs.onnx_model is not None:
                files[f"cpu_stages/{base}.onnx"] = bytes(cs.onnx_model)
                cpu[side] = {"name": cs.name, "format": "onnx", "graph": f"cpu_stages/{base}.onnx",
                             "per_sample_shapes": [list(s) for s in cs.per_sample_shapes]}
                continue
            files[f"cpu_stages/{base}.json"] = json.dumps(cs.data, indent=1, sort_keys=True).encode()
            files[f"tensors/{base}.safetensors"] = _save_tensors(cs.tensors, f"CPU stage '{cs.name}'")
            cpu[side] = {"name": cs.name, "graph": f"cpu_stages/{base}.json", "tensors": f"tensors/{base}.safetensors",
                         "per_sample_shapes": [list(s) for s in cs.per_sample_shapes]}
        device_json = {
            "version": self.version, "device_image_name": self.device_image_name, "arch": self.arch.name,
            "devtype": self.devtype.name, "chip_ids": list(self.chip_ids), "fp32_fallback": self.fp32_fallback.name,
            "microbatch_size": self.microbatch_size, "microbatch_count": self.microbatch_count,
            "grid_size": list(self.grid_size), "harvested_rows": self.harvested_rows,
            # Every module's build carries the card's descriptor; the first one's is the image's.
            "device_descriptor": f"{stages[0]['backend_build']}/device_desc.yaml",
            "training": self.training, "optimizer": self.optimizer, "loss_module": self.loss_module,
            "module_name_to_metadata": self.module_name_to_metadata, "modules": self.modules,
            "inputs": [r.to_dict() for r in self.inputs], "outputs": [r.to_dict() for r in self.outputs],
            "stages": stages, "cpu_stages": cpu, "verify_cfg": self.verify_cfg,
            "pybuda_pip_version_id": self.pybuda_pip_version_id, "pybuda_commit_hash": self.pybuda_commit_hash,
            "budabackend_commit_hash": self.budabackend_commit_hash,
        }
        files["device.json"] = json.dumps(device_json, indent=1, sort_keys=True).encode()
        files["compile_and_runtime_config.json"] = json.dumps(
            {"compiler_cfg": self.compiler_cfg, "runtime_env": self.runtime_env}, indent=1, sort_keys=True).encode()
        return files

    def save_to_disk(self, img_path: Optional[Union[str, "os.PathLike[str]"]] = None) -> str:
        """Write the image to ``img_path`` (default ``device_images/<device name>.tti``); returns the path."""
        path = os.fspath(img_path) if img_path is not None else os.path.join(
            "device_images", safe_file_name(self.device_image_name) + ".tti")
        size = write_archive(path, self.to_files(), self.version)
        log.info("device image '%s' written (%s bytes)", path, f"{size:,}")
        return path

    # --- loading --------------------------------------------------------------------------------------------
    @staticmethod
    def load_from_disk(img_path: Union[str, "os.PathLike[str]"], device_id_overrides: Optional[Sequence[int]] = None,
                       *, max_bytes: int = DEFAULT_MAX_BYTES) -> "TTDeviceImage":
        """Load and check the image at ``img_path`` (see :mod:`pybuda.tti.archive` for what is refused).

        ``device_id_overrides`` replaces the recorded chip ids. Nothing from the file is imported or run, and
        the global compiler config is left alone: the image runs with its own.
        """
        files = read_archive(img_path, max_bytes=max_bytes)
        image = _from_files(files, str(img_path))
        if device_id_overrides is not None:
            ids = list(device_id_overrides)
            if len(ids) != len(image.chip_ids):
                raise ImageError(f"device_id_overrides {ids} must name {len(image.chip_ids)} chip(s), as the image has")
            image.chip_ids = ids
        return image

    @staticmethod
    def create_image_from_device(device: Any, *, training: bool = False, microbatch_count: int = 1,
                                 verify_cfg: Any = None) -> "TTDeviceImage":
        """The image of a compiled TTDevice (see :func:`pybuda.tti.capture.image_from_device`)."""
        from pybuda.tti.capture import image_from_device

        return image_from_device(device, training=training, microbatch_count=microbatch_count, verify_cfg=verify_cfg)


# --- writing helpers ---------------------------------------------------------------------------------------------


def _unique(base: str, used: Dict[str, int]) -> str:
    n = used.get(base, 0)
    used[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def _netlist_text(netlist: Any) -> str:
    from pybuda.netlist import to_yaml

    return to_yaml(netlist)


def _save_tensors(tensors: Mapping[str, torch.Tensor], what: str) -> bytes:
    from safetensors.torch import save

    plain = {}
    for k, v in tensors.items():
        if not isinstance(v, torch.Tensor) or v.is_sparse or v.is_quantized or v.is_complex():
            raise ImageError(f"{what}: tensor '{k}' cannot be stored in an image ({type(v).__name__})")
        # Own, contiguous storage: safetensors refuses tensors that share memory.
        plain[k] = v.detach().cpu().contiguous().clone()
    return save(plain)


# --- reading helpers ---------------------------------------------------------------------------------------------


class _Reader:
    """Typed access to a parsed JSON object, with errors that name the file and the key."""

    def __init__(self, obj: Any, where: str):
        if not isinstance(obj, dict):
            raise ImageError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        self.obj, self.where = obj, where

    def get(self, key: str, types: Union[type, Tuple[type, ...]], optional: bool = False, default: Any = None) -> Any:
        if key not in self.obj:
            if optional:
                return default
            raise ImageError(f"{self.where}: missing '{key}'")
        value = self.obj[key]
        if optional and value is None:
            return default
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
            raise ImageError(f"{self.where}: '{key}' has the wrong type ({type(value).__name__})")
        return value

    def sub(self, key: str) -> "_Reader":
        return _Reader(self.get(key, dict), f"{self.where}.{key}")


def _as_tuple(types: Union[type, Tuple[type, ...]]) -> Tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _json(files: Mapping[str, bytes], name: str) -> Any:
    data = files.get(name)
    if data is None:
        raise ImageError(f"device image has no '{name}'")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ImageError(f"'{name}' is not valid JSON: {e}") from None


def _file(files: Mapping[str, bytes], name: Any, what: str) -> bytes:
    if not isinstance(name, str) or name not in files:
        raise ImageError(f"device.json: {what} names file {name!r}, which the image does not hold")
    return files[name]


def _load_tensors(data: bytes, name: str) -> Dict[str, torch.Tensor]:
    from safetensors.torch import load

    try:
        return dict(load(data))
    except Exception as e:  # the safetensors reader raises its own error types for malformed headers
        raise ImageError(f"'{name}' is not a valid safetensors file: {e}") from None


def _enum(enum_type: Any, name: Any, where: str) -> Any:
    if not isinstance(name, str) or name not in enum_type.__members__:
        raise ImageError(f"device.json: {where} {name!r} is not one of {list(enum_type.__members__)}")
    return enum_type[name]


def _shape(value: Any, where: str) -> Tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in value):
        raise ImageError(f"device.json: {where} is not a shape (a list of non-negative ints): {value!r}")
    return tuple(value)


def _records(items: Any, where: str) -> List[TensorRecord]:
    if not isinstance(items, list):
        raise ImageError(f"device.json: '{where}' is not a list")
    from pybuda.ops.common import torch_dtype

    out = []
    for i, item in enumerate(items):
        r = _Reader(item, f"device.json {where}[{i}]")
        dtype = r.get("dtype", str)
        try:
            torch_dtype(dtype)
        except Exception:
            raise ImageError(f"device.json {where}[{i}]: unknown dtype {dtype!r}") from None
        out.append(TensorRecord(r.get("name", str), _shape(r.get("shape", list), f"{where}[{i}].shape"), dtype))
    return out


def _version_ok(version: str) -> bool:
    return version.split(".")[:2] == IMAGE_VERSION.split(".")[:2]


def _from_files(files: Mapping[str, bytes], path: str) -> TTDeviceImage:
    manifest = _json(files, MANIFEST)
    version = manifest.get("image_version") if isinstance(manifest, dict) else None
    if not isinstance(version, str) or not _version_ok(version):
        raise ImageError(f"device image '{path}' has image version {version!r}; this pybuda reads version "
                         f"{IMAGE_VERSION} (recompile the model with this pybuda to get a loadable image)")
    d = _Reader(_json(files, "device.json"), "device.json")
    if d.get("version", str) != version:
        raise ImageError(f"device image '{path}': device.json says version {d.get('version', str)!r}, the manifest "
                         f"{version!r}")
    arch = _enum(BackendDevice, d.get("arch", str), "arch")
    devtype = _enum(BackendType, d.get("devtype", str), "devtype")
    config = _Reader(_json(files, "compile_and_runtime_config.json"), "compile_and_runtime_config.json")
    desc_text = _file(files, d.get("device_descriptor", str), "device_descriptor")
    device = _read_descriptor(desc_text)
    if device.arch != arch:
        raise ImageError(f"device image '{path}': device.json says {arch.value}, its device descriptor "
                         f"{device.arch.value}")
    stages = [_read_stage(files, item, i) for i, item in enumerate(d.get("stages", list))]
    if not stages:
        raise ImageError(f"device image '{path}' holds no compiled module")
    cpu = d.sub("cpu_stages")
    for key in cpu.obj:
        if key not in ("pre", "post"):
            raise ImageError(f"device.json cpu_stages: unknown stage '{key}'")
    image = TTDeviceImage(
        version=version, device_image_name=d.get("device_image_name", str), arch=arch, devtype=devtype,
        chip_ids=list(d.get("chip_ids", list)), fp32_fallback=_enum(DataFormat, d.get("fp32_fallback", str),
                                                                    "fp32_fallback"),
        microbatch_size=_positive(d.get("microbatch_size", int), "microbatch_size"),
        microbatch_count=_positive(d.get("microbatch_count", int), "microbatch_count"),
        grid_size=list(_shape(d.get("grid_size", list), "grid_size")), harvested_rows=d.get("harvested_rows", int),
        device=device, stages=stages, inputs=_records(d.get("inputs", list), "inputs"),
        outputs=_records(d.get("outputs", list), "outputs"), compiler_cfg=config.get("compiler_cfg", dict),
        runtime_env=config.get("runtime_env", dict), verify_cfg=d.get("verify_cfg", dict, optional=True),
        training=d.get("training", bool), optimizer=d.get("optimizer", dict, optional=True),
        loss_module=d.get("loss_module", str, optional=True),
        module_name_to_metadata=d.get("module_name_to_metadata", dict),
        cpu_pre=_read_cpu_stage(files, cpu.obj.get("pre"), "pre"),
        cpu_post=_read_cpu_stage(files, cpu.obj.get("post"), "post"),
        pybuda_pip_version_id=d.get("pybuda_pip_version_id", str), pybuda_commit_hash=d.get("pybuda_commit_hash", str),
        budabackend_commit_hash=d.get("budabackend_commit_hash", str))
    if image.training:
        raise ImageError(f"device image '{path}' is a training image; this pybuda runs inference images only")
    if image.pybuda_pip_version_id != pybuda.__version__:
        log.warning("device image '%s' was written by pybuda %s; this is %s", path, image.pybuda_pip_version_id,
                    pybuda.__version__)
    if len(image.inputs) != len(stages[0].host_io.inputs) and image.cpu_pre is None:
        raise ImageError(f"device image '{path}': {len(image.inputs)} recorded input(s), but the first module "
                         f"takes {len(stages[0].host_io.inputs)}")
    return image


def _positive(value: int, what: str) -> int:
    if value < 1:
        raise ImageError(f"device.json: {what} must be at least 1, got {value}")
    return value


def _read_descriptor(text: bytes) -> DeviceDescriptor:
    from pybuda.backend_build.descriptors import read_device_descriptor

    try:
        return read_device_descriptor(text.decode())
    except (ConfigError, UnicodeDecodeError) as e:
        raise ImageError(f"the image's device descriptor is not valid: {e}") from None


def _read_stage(files: Mapping[str, bytes], item: Any, index: int) -> ImageStage:
    from pybuda.netlist import parse_yaml, validate

    r = _Reader(item, f"device.json stages[{index}]")
    name = r.get("module", str)
    netlist_file = r.get("netlist", str)
    try:
        netlist = parse_yaml(_file(files, netlist_file, f"module '{name}'").decode())
        validate(netlist)
    except (NetlistError, UnicodeDecodeError) as e:
        raise ImageError(f"'{netlist_file}' (module '{name}') is not a valid netlist: {e}") from None
    try:
        host_io = HostIO.from_dict(r.get("host_io", dict))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ImageError(f"device.json stages[{index}].host_io is malformed: {e}") from None
    _check_host_io(host_io, netlist, name)
    tensors_file = r.get("tensors", str)
    tensors = _load_tensors(_file(files, tensors_file, f"module '{name}'"), tensors_file)
    _check_tensors(host_io, tensors, name)
    build_dir = r.get("backend_build", str)
    build_files = r.get("backend_build_files", list)
    build = {}
    for rel in build_files:
        if not isinstance(rel, str):
            raise ImageError(f"device.json stages[{index}].backend_build_files holds a non-string")
        try:
            build[rel] = _file(files, f"{build_dir}/{rel}", f"backend build of module '{name}'").decode()
        except UnicodeDecodeError:
            raise ImageError(f"'{build_dir}/{rel}' is not UTF-8 text") from None
    epochs = r.get("temporal_epochs", dict)
    if not all(isinstance(k, str) and k in netlist.graphs and isinstance(v, int) and not isinstance(v, bool)
               for k, v in epochs.items()):
        raise ImageError(f"device.json stages[{index}].temporal_epochs does not map the netlist's graphs to ints")
    names = r.get("input_names", list)
    return ImageStage(name, netlist, host_io, tensors, [str(n) for n in names], dict(epochs), build)


def _check_host_io(host_io: HostIO, netlist: Any, module: str) -> None:
    """The record must speak of the netlist's own queues and program, and name registered host TMs only."""
    from pybuda.ops import registry

    for rec in host_io.inputs + host_io.outputs + host_io.ram_queues:
        if rec.queue not in netlist.queues:
            raise ImageError(f"module '{module}': the host-I/O record names queue '{rec.queue}', which the "
                             f"netlist lacks")
        if rec.kind not in ("input", "output", "parameter", "constant"):
            raise ImageError(f"module '{module}': queue '{rec.queue}' has unknown kind '{rec.kind}'")
        for tm in rec.host_tms:
            if not registry.has(tm.op_type):
                raise ImageError(f"module '{module}': queue '{rec.queue}' has an unknown host TM '{tm.op_type}'")
    if host_io.program not in {p.name for p in netlist.programs}:
        raise ImageError(f"module '{module}': the host-I/O record runs program '{host_io.program}', which the "
                         f"netlist lacks")


def _check_tensors(host_io: HostIO, tensors: Mapping[str, torch.Tensor], module: str) -> None:
    import math

    missing = [k for k in host_io.tensor_names() if k not in tensors and k not in _folded_copies(host_io)]
    if missing:
        raise ImageError(f"module '{module}': the image lacks tensor(s) {missing}")
    for p in host_io.parameters:
        if p.tensor not in tensors:
            continue  # a parameter folded at compile time: stored in its folded form only
        t = tensors[p.tensor]
        if tuple(t.shape) != tuple(p.shape):
            raise ImageError(f"module '{module}': parameter '{p.name}' is recorded as {list(p.shape)} but its "
                             f"tensor is {list(t.shape)}")
    for q in host_io.ram_queues:
        if q.tensor is None:
            continue
        shape = q.device_shape if q.device_shape is not None else q.framework_shape
        if shape and tensors[q.tensor].numel() != math.prod(shape) and not q.host_tms:
            raise ImageError(f"module '{module}': queue '{q.queue}' holds {list(shape)} but its tensor is "
                             f"{list(tensors[q.tensor].shape)}")


def _folded_copies(host_io: HostIO) -> set:
    """Tensor keys an image leaves out: the framework values of parameters folded at compile time (consteval).
    The device holds their folded values; they cannot be updated on the device, so only a checkpoint of the
    original model would need them — and they would double the image of a model whose weights are transposed."""
    folded = host_io.transformed_parameters()
    return {p.tensor for p in host_io.parameters if p.name in folded and p.tensor != p.name}


def _read_cpu_stage(files: Mapping[str, bytes], item: Any, side: str) -> Optional[CpuStage]:
    if item is None:
        return None
    r = _Reader(item, f"device.json cpu_stages.{side}")
    graph_file = r.get("graph", str)
    fmt = r.get("format", str, optional=True, default="fx")
    if fmt not in ("fx", "onnx"):
        raise ImageError(f"device.json cpu_stages.{side}: unknown stage format '{fmt}'")
    if fmt == "onnx":
        shapes = [_shape(s, f"cpu_stages.{side}.per_sample_shapes") for s in r.get("per_sample_shapes", list)]
        stage = CpuStage(r.get("name", str), {}, {}, shapes, onnx_model=_file(files, graph_file, f"CPU stage '{side}'"))
        stage.function()  # parsed and checked now: a malformed stage is an ImageError at load
        return stage
    try:
        data = json.loads(_file(files, graph_file, f"CPU stage '{side}'"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ImageError(f"'{graph_file}' is not valid JSON: {e}") from None
    tensors_file = r.get("tensors", str)
    tensors = _load_tensors(_file(files, tensors_file, f"CPU stage '{side}'"), tensors_file)
    shapes = [_shape(s, f"cpu_stages.{side}.per_sample_shapes") for s in r.get("per_sample_shapes", list)]
    stage = CpuStage(r.get("name", str), data, tensors, shapes)
    stage.function()  # rebuilt now: a malformed stage is an ImageError at load, not at the first push
    return stage

