"""TTDevice: one or more Tenstorrent chips, here always the simulated chip.

There is never silicon: :func:`detect_available_devices` lists the one simulated card (its arch), and a
TTDevice asked for ``BackendType.Silicon`` (TT-Buda's default) runs as ``BackendType.Golden`` and says so
once in the log (not with ``PYBUDA_EMULATE_SILICON_DEVICE``, where the user asked for exactly that). The arch defaults follow TT-Buda's rule for non-silicon devices: Grayskull, unless
``GOLDEN_WORMHOLE_B0`` (Wormhole B0) or ``PYBUDA_GOLDEN_BLACKHOLE`` (Blackhole) is set.

Compiling traces the modules for one sample of the first push (dim 0 is the microbatch), runs the
compiler (``pybuda.compile.compile_graph``) for the device descriptor, and gets an executor
per graph from :func:`pybuda.runtime.backend_api.create_executor`. With ``PYBUDA_N300_DATA_PARALLEL`` the
two chips of an n300 each run half of every microbatch (:mod:`pybuda.runtime.data_parallel`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from pybuda.arch.types import BackendDevice, BackendType
from pybuda.config import DeviceMode, runtime_env
from pybuda.errors import ConfigError, InputError, PybudaError
from pybuda.runtime.backend_api import CompiledArtifact, compile_modules
from pybuda.runtime.data_parallel import compile_data_parallel, data_parallel_requested
from pybuda.runtime.device import Device
from pybuda.runtime.push import InputItem
from pybuda.dtypes import DataFormat

log = logging.getLogger(__name__)

_silicon_notice_given = False


def _simulated_arch() -> BackendDevice:
    """The arch of the simulated card: TT-Buda's rule for non-silicon devices (Grayskull, unless
    ``GOLDEN_WORMHOLE_B0`` or ``PYBUDA_GOLDEN_BLACKHOLE``)."""
    env = runtime_env()
    return (BackendDevice.Wormhole_B0 if env.golden_wormhole_b0 else
            BackendDevice.Blackhole if env.golden_blackhole else BackendDevice.Grayskull)


def _configured_arch() -> Optional[BackendDevice]:
    """The arch of the card the global config targets (``device_config``), None without one: a TTDevice
    created for an offline compile (``device_config="galaxy"``) is of that card's arch."""
    from pybuda.arch import get_device_descriptor
    from pybuda.config import _get_global_compiler_config

    preset = _get_global_compiler_config().device_config
    return get_device_descriptor(device_config=preset).arch if preset else None


def detect_available_devices() -> List[BackendDevice]:
    """Archs of the Tenstorrent cards pybuda can run on: one simulated card, of the arch TT-Buda's
    emulated device had (``GOLDEN_WORMHOLE_B0`` → Wormhole_B0, ``PYBUDA_GOLDEN_BLACKHOLE`` → Blackhole, else
    Grayskull). These are simulated, never silicon: a TTDevice asked for ``BackendType.Silicon`` still runs
    on the golden backend (:func:`silicon_present` is always False)."""
    return [_simulated_arch()]


def silicon_present() -> bool:
    """Whether real Tenstorrent silicon is attached: never (pybuda only simulates chips)."""
    return False


def _silicon_notice(name: str, arch: BackendDevice) -> None:
    global _silicon_notice_given
    from pybuda.config import read_env

    if read_env().emulate_silicon_device:
        return  # PYBUDA_EMULATE_SILICON_DEVICE: the user asked for the simulated card in silicon's place
    if not _silicon_notice_given:
        _silicon_notice_given = True
        log.warning("No Tenstorrent silicon found: TTDevice '%s' runs on the simulated %s chip (BackendType.Golden)",
                    name, arch.value)


class _class_or_instance:
    """A method that gets the class when called on the class and the instance when called on one
    (``TTDevice.load_image(img=...)`` makes a device, ``tt0.load_image(img=...)`` loads onto ``tt0``)."""

    def __init__(self, func: Any):
        self.func = func
        self.__doc__ = func.__doc__

    def __get__(self, obj: Any, cls: Any) -> Any:
        target = obj if obj is not None else cls
        return lambda *args, **kwargs: self.func(target, *args, **kwargs)


def _checked_optimizer(name: str, optimizer: Any) -> Any:
    """``optimizer`` when it is a pybuda optimizer (or None); a ConfigError otherwise. A TTDevice compiles its
    optimizer's update rule for the chip, which only pybuda's optimizers describe: a ``torch.optim`` optimizer
    here failed at the first training step with an AttributeError."""
    from pybuda.optimizers import Optimizer

    if optimizer is None or isinstance(optimizer, Optimizer):
        return optimizer
    kind = f"{type(optimizer).__module__}.{type(optimizer).__name__}"
    hint = ""
    if isinstance(optimizer, torch.optim.Optimizer):
        hint = ("; a torch optimizer trains on the host: place the module on a CPUDevice with "
                "optimizer_f=lambda module: torch.optim...(module.parameters(), ...) instead")
    raise ConfigError(f"TTDevice '{name}': optimizer must be a pybuda optimizer (pybuda.optimizers.SGD, Adam, "
                      f"AdamW, LAMB, LARS), got {kind}{hint}")


class TTDevice(Device):
    """TTDevice represents one or more Tenstorrent devices that will receive modules to run.

    ``num_chips``/``chip_ids`` follow TT-Buda: neither given → chip 0; ``num_chips=N`` → chips
    ``0..N-1``; ``num_chips=0`` → all detected chips (one simulated chip here). ``optimizer`` and
    ``scheduler`` are used in training pipelines. Without ``arch``, the device is of the arch of the
    configured card (``device_config``), else of the simulated card (:func:`detect_available_devices`).
    ``fp32_fallback`` is the device format float32 tensors get. ``device_mode=DeviceMode.CompileOnly``
    compiles without running.
    """

    def __init__(self, name: str, num_chips: Optional[int] = None, chip_ids: Optional[List[Any]] = None,
                 arch: Optional[Union[BackendDevice, str]] = None, devtype: Optional[BackendType] = None,
                 device_mode: Optional[DeviceMode] = None, optimizer: Any = None, scheduler: Any = None,
                 fp32_fallback: DataFormat = DataFormat.Float16_b, mp_context: Any = None,
                 module: Union[Any, List[Any], None] = None):
        env = runtime_env()
        if devtype is not None and not isinstance(devtype, BackendType):
            raise ConfigError(f"TTDevice '{name}': devtype must be a pybuda.BackendType, got {devtype!r}")
        requested = devtype if devtype is not None else (BackendType.Golden if env.devmode else BackendType.Silicon)
        if arch is not None and not isinstance(arch, BackendDevice):
            if not isinstance(arch, str):
                raise ConfigError(f"TTDevice '{name}': arch must be a pybuda.BackendDevice, got {arch!r}")
            arch = BackendDevice.from_string(arch)
        if arch is None:
            arch = _configured_arch() or _simulated_arch()
        if requested == BackendType.Silicon and not silicon_present():
            _silicon_notice(name, arch)
            requested = BackendType.Golden
        self.requested_devtype = devtype
        self.devtype = requested
        self.arch = arch
        self.chip_ids = _chip_ids(name, num_chips, chip_ids)
        self.num_chips = len(self.chip_ids)
        if device_mode is not None and not isinstance(device_mode, DeviceMode):
            raise ConfigError(f"TTDevice '{name}': device_mode must be a pybuda.DeviceMode, got {device_mode!r}")
        self.device_mode = device_mode if device_mode is not None else DeviceMode.CompileAndRun
        self.optimizer = _checked_optimizer(name, optimizer)
        self.scheduler = scheduler
        self.fp32_fallback = DataFormat.from_json(fp32_fallback)
        self._artifact: Optional[CompiledArtifact] = None
        self._active_subgraph: Optional[int] = None
        super().__init__(name, mp_context=mp_context)
        if module is not None:
            self.place_module(module)

    def _check_first_push(self, item: InputItem) -> None:
        image = self.loaded_image
        if image is not None:
            from pybuda.tti.load import check_push

            check_push(image, list(item.tensors), self.name)
            return
        dims = []
        for label, t in zip(item.names or range(len(item.tensors)), item.tensors):
            if t.dim() == 0:
                raise InputError(f"TTDevice '{self.name}': input {label} is a 0-d tensor; dim 0 of every input is "
                                 f"the microbatch size, so inputs need at least one dimension")
            dims.append(int(t.shape[0]))
        if len(set(dims)) > 1:
            raise InputError(f"TTDevice '{self.name}': inputs disagree on dim 0 {dims}; dim 0 of every input is the "
                             f"microbatch size and must be the same for all of them")

    def get_device_config(self, compiler_cfg: Any = None):
        """The device descriptor compiled for: the config's ``backend_device_descriptor_path`` file when set,
        else the arch (or the config's ``device_config`` preset, which must be of the same arch), the
        harvesting mask and the chip count. The descriptor must be of this device's arch."""
        from pybuda.arch import get_device_descriptor
        from pybuda.config import _get_global_compiler_config

        cfg = compiler_cfg or _get_global_compiler_config()
        if getattr(cfg, "backend_device_descriptor_path", ""):
            from pybuda.compile import descriptor_from_file

            return descriptor_from_file(cfg.backend_device_descriptor_path, self.arch, self.num_chips)
        resolve = getattr(cfg, "resolved_harvesting_mask", None)  # harvested_rows (NoC rows) -> mask
        mask = (resolve(self.arch) if resolve is not None else getattr(cfg, "harvesting_mask", 0)) or 0
        preset = getattr(cfg, "device_config", None)
        if not preset:
            return get_device_descriptor(self.arch, harvesting_mask=mask, num_chips=self.num_chips)
        desc = get_device_descriptor(None, device_config=preset, harvesting_mask=mask, num_chips=self.num_chips)
        if desc.arch != self.arch:
            raise ConfigError(f"TTDevice '{self.name}' is {self.arch.value}, but device_config '{preset}' is "
                              f"{desc.arch.value}")
        return desc

    def _compile_sample(self, sample: InputItem, config: Any = None, verify_cfg: Any = None,
                        want_outputs: bool = True) -> Optional[InputItem]:
        """Trace and compile the modules for ``sample``; returns sample outputs (shapes/dtypes for the
        next device: the traced single-sample values repeated over the microbatch), or None without
        ``want_outputs`` (the last device: computing them would run the model on the CPU for nothing)."""
        from pybuda.config import _get_global_compiler_config

        if not self.modules:
            raise PybudaError(f"TTDevice '{self.name}' has no modules; place one with place_module")
        image = self.loaded_image
        if image is not None:  # a loaded device image: nothing to compile, it runs from the image's data
            from pybuda.tti.load import check_push, image_artifact

            if image.cpu_pre is None:
                check_push(image, list(sample.tensors), self.name)
            self._artifact = image_artifact(image)
            return InputItem(tuple(self._artifact.sample_outputs)) if want_outputs else None
        cfg = dataclasses.replace(config or _get_global_compiler_config())
        cfg.fp32_fallback = self.fp32_fallback
        if self.num_chips > 1:
            cfg.num_chips = self.num_chips
        mb = sample.microbatch
        modules = self._translated_modules if self._translated_modules is not None else self.modules
        if data_parallel_requested():
            self._artifact = compile_data_parallel(modules, sample.tensors, cfg, devtype=self.devtype,
                                                   card=self.get_device_config(cfg), microbatch=mb,
                                                   verify_cfg=verify_cfg, input_names=sample.names,
                                                   device_name=self.name)
            return InputItem(tuple(self._artifact.sample_outputs)) if want_outputs else None
        self._artifact = compile_modules(modules, sample.tensors, cfg, devtype=self.devtype,
                                         device=self.get_device_config(cfg), microbatch=mb, verify_cfg=verify_cfg,
                                         input_names=sample.names, compile_for_device=True)
        return InputItem(tuple(self._artifact.sample_outputs)) if want_outputs else None

    def compile_for(self, inputs: Sequence[Any], compiler_cfg: Any = None, targets: Sequence[Any] = (),
                    microbatch_size: int = 0, microbatch_count: int = 1, verify_cfg: Any = None) -> Tuple[Any, ...]:
        """Compile the modules placed on this device for ``inputs`` (shapes and formats; dim 0 is the
        microbatch) and return the output tensors (pybuda Tensors), as TT-Buda's ``compile_for``.

        ``compiler_cfg`` defaults to the global config; ``microbatch_size``, when given, must equal dim 0 of the
        inputs; ``targets`` are for training pipelines (``initialize_pipeline(training=True)``)."""
        return self._compile_for_inputs(inputs, compiler_cfg, targets, microbatch_size, microbatch_count, verify_cfg)

    def generate(self, loop_count: int, write_index: int = -1, tokens_per_iter: int = -1,
                 token_id: int = -1) -> None:
        """Run the generative forward pass for ``loop_count`` queued inputs. The past-cache write position is
        ``write_index >= 0``, or given by ``tokens_per_iter > 0`` and ``token_id >= 0`` (TT-Buda's rule; the
        two forms are exclusive).

        Compiled graphs here keep no past cache on the device (a decoder takes its cache as inputs and returns
        it as outputs), so after the checks the inputs run as :meth:`forward`."""
        from pybuda.runtime.push import _check_loop_count

        _check_loop_count(self.name, "generate", loop_count)
        if tokens_per_iter != -1 or token_id != -1:
            if write_index != -1:
                raise InputError(f"TTDevice '{self.name}': generate takes write_index, or tokens_per_iter and "
                                 f"token_id, not both")
            if not (isinstance(tokens_per_iter, int) and tokens_per_iter > 0 and isinstance(token_id, int)
                    and token_id >= 0):
                raise InputError(f"TTDevice '{self.name}': generate needs tokens_per_iter > 0 and token_id >= 0, "
                                 f"got tokens_per_iter={tokens_per_iter!r}, token_id={token_id!r}")
            self.forward(loop_count)
            return
        super().generate(loop_count, write_index)

    # --- device images ------------------------------------------------------------------------------
    @property
    def loaded_image(self) -> Any:
        """The :class:`~pybuda.TTDeviceImage` this device runs (after :meth:`load_image`), else None."""
        from pybuda.tti.load import image_modules

        return image_modules(self.modules) if self.modules else None

    def compile_to_image(self, *, img_path: Optional[str] = None, training: bool = False,
                         sample_inputs: Any = (), sample_targets: Any = (), microbatch_count: int = 1,
                         verify_cfg: Any = None, cpueval_outputs: Any = None) -> Any:
        """Compile this device's modules without running them and save a device image (reference §5).

        ``sample_inputs`` is the compile sample unless inputs were pushed (dim 0 is the microbatch). The
        image (netlists, host-I/O records, tensors, CPU-fallback stages and the backend build, no code) is
        written to ``img_path`` (default ``device_images/<device name>.tti``) and returned. Offline
        targeting: compile for any card with ``set_configuration_options(device_config=...,
        harvested_rows=..., backend_device_descriptor_path=...)``. ``cpueval_outputs`` is accepted for
        TT-Buda's signature; images store no CPU outputs.
        """
        from pybuda.runtime import api
        from pybuda.tti.image import TTDeviceImage

        if training or sample_targets:
            raise PybudaError("compile_to_image(training=True): device images hold inference programs only; train "
                              "with initialize_pipeline(training=True) / run_training, then save an inference image")
        if self.loaded_image is not None:
            raise PybudaError(f"TTDevice '{self.name}' already runs a loaded image; save that image instead")
        previous = self.device_mode
        self.device_mode = DeviceMode.CompileOnly
        try:
            api.initialize_pipeline(training=False, sample_inputs=sample_inputs, microbatch_count=microbatch_count,
                                    _sequential=True, _verify_cfg=verify_cfg, _device_mode=DeviceMode.CompileOnly)
            if self._artifact is not None and self._artifact.data_parallel > 1:
                raise PybudaError(f"compile_to_image: TTDevice '{self.name}' was compiled data parallel "
                                  f"(PYBUDA_N300_DATA_PARALLEL); device images hold one chip's program for the "
                                  f"whole microbatch: unset it to save an image")
            if self._artifact is not None and self._artifact.tapped_ops:
                raise PybudaError(f"compile_to_image: TTDevice '{self.name}' saves intermediates of ops "
                                  f"{self._artifact.tapped_ops} (op_intermediates_to_save / "
                                  f"insert_tapout_queue_for_op); device images hold no intermediates queue: compile "
                                  f"the image without them")
            image = TTDeviceImage.create_image_from_device(self, microbatch_count=microbatch_count,
                                                           verify_cfg=verify_cfg)
        finally:
            self.device_mode = previous
            api.shutdown()
        image.save_to_disk(img_path)
        return image

    @_class_or_instance
    def load_image(target: Any, *, img: Any = None, img_path: Optional[str] = None) -> "TTDevice":
        """Run a device image: ``TTDevice.load_image(img=TTDeviceImage.load_from_disk(path))`` (or
        ``img_path=``) returns a new TTDevice for the image's card; on a device instance, loads the image
        onto that device, which must be of the image's arch (an ImageError otherwise). Then
        ``push_to_inputs`` and ``run_inference`` as after a compile."""
        from pybuda.errors import ImageError
        from pybuda.tti.image import TTDeviceImage
        from pybuda.tti.load import ImageModule

        if (img is None) == (img_path is None):
            raise ImageError("load_image takes exactly one of img= (a TTDeviceImage) or img_path=")
        image = img if img is not None else TTDeviceImage.load_from_disk(img_path)
        if not isinstance(image, TTDeviceImage):
            raise ImageError(f"load_image: img must be a TTDeviceImage, got {type(image).__name__}")
        if isinstance(target, TTDevice):
            device = target
            if device.arch != image.arch:
                raise ImageError(f"image '{image.device_image_name}' was compiled for {image.arch.value} "
                                 f"({image.device.name}); TTDevice '{device.name}' is {device.arch.value}")
            if device.modules:
                raise ImageError(f"TTDevice '{device.name}' already holds modules; load images onto an empty device")
        else:
            device = target(image.device_image_name, arch=image.arch, devtype=image.devtype,
                            chip_ids=list(image.chip_ids), fp32_fallback=image.fp32_fallback)
        device.place_module([ImageModule(stage, image) for stage in image.stages])
        return device

    def forward_one(self, item: InputItem) -> Tuple[torch.Tensor, ...]:
        if self.device_mode == DeviceMode.CompileOnly:
            raise PybudaError(f"TTDevice '{self.name}' was compiled with DeviceMode.CompileOnly and cannot run inputs")
        if self._artifact is None:
            raise PybudaError(f"TTDevice '{self.name}' was not compiled; run initialize_pipeline first")
        active = self._active_subgraph
        if active is None:
            return tuple(self._artifact.run(list(item.tensors)))
        return tuple(self._artifact.run_stage(active, list(item.tensors)))

    def take_intermediates(self) -> List[Tuple[str, torch.Tensor]]:
        return self._artifact.take_intermediates() if self._artifact is not None else []

    def tap_info(self) -> Dict[str, List[str]]:
        if self._artifact is None:
            return {"tapped": [], "ops": []}
        ops = [n.name for stage in self._artifact.stages if stage.graph is not None for n in stage.graph.ops]
        return {"tapped": list(self._artifact.tapped_ops), "ops": ops}

    def training_performance(self, microbatch_count: int = 1, accumulation_steps: int = 1) -> Any:
        """The modelled speed of this device's training programs (forward, backward, optimizer) on its card, as
        a :class:`pybuda.perf.training.TrainingPerf`; needs a running training pipeline."""
        from pybuda.runtime import training

        session = training.current()
        if session is None or self not in session.devices:
            raise PybudaError(f"TTDevice '{self.name}' is not in a running training pipeline; call "
                              f"initialize_pipeline(training=True) first")
        return session.trainer_of(self).performance(microbatch_count, accumulation_steps)

    def inference_performance(self) -> List[Any]:
        """The modelled speed of this device's compiled inference graphs on its card: one
        :class:`pybuda.perf.types.PerfReport` per compiled module (with ``PYBUDA_N300_DATA_PARALLEL``, both
        chips of the n300 running their halves of the microbatch)."""
        from pybuda.perf.model import estimate_compiled
        from pybuda.runtime.data_parallel import data_parallel_report

        if self._artifact is None:
            raise PybudaError(f"TTDevice '{self.name}' was not compiled; run initialize_pipeline first")
        reports = []
        for results in self._artifact.compile_results:
            if results is None or results.netlist is None:
                continue
            report = estimate_compiled(results)
            if self._artifact.data_parallel > 1:
                report = data_parallel_report(report, self._artifact.data_parallel, self.get_device_config())
            reports.append(report)
        return reports

    def get_compiled_results(self) -> Optional[List[Any]]:
        """The compiler's results for each module (None before compile, or for uncompiled graphs)."""
        return self._artifact.compile_results if self._artifact is not None else None

    # --- TT-Buda's inspection API ------------------------------------------------------------------------
    def set_active_subgraph(self, subgraph_index: int) -> None:
        """Run only module ``subgraph_index`` of this device (each module placed on a TTDevice is compiled into
        its own subgraph): pushes then feed that module's inputs and outputs come from it. ``None`` runs
        the whole chain again."""
        if subgraph_index is not None:
            if not isinstance(subgraph_index, int) or isinstance(subgraph_index, bool) or \
                    not 0 <= subgraph_index < max(1, len(self.modules)):
                raise InputError(f"TTDevice '{self.name}' has {len(self.modules)} subgraph(s) (one per module); "
                                 f"got subgraph index {subgraph_index!r}")
        self._active_subgraph = subgraph_index

    def get_active_subgraph(self) -> Optional[int]:
        """The subgraph :meth:`set_active_subgraph` selected (None: all modules, in order)."""
        return self._active_subgraph

    def validate_push(self, item: InputItem) -> InputItem:
        active = self._active_subgraph
        if active in (None, 0) or self._artifact is None:
            return super().validate_push(item)
        from pybuda.runtime.backend_api import batched_shape

        stage = self._artifact.stages[active]
        mb = self._artifact.microbatch
        want = [batched_shape(n.shape, mb) for n in stage.graph.inputs] if stage.graph is not None else None
        got = [tuple(t.shape) for t in item.tensors]
        if want is not None and got != [tuple(w) for w in want]:
            raise InputError(f"TTDevice '{self.name}': subgraph {active} ('{stage.module_name}') takes inputs of "
                             f"shapes {[list(w) for w in want]}, got {[list(g) for g in got]}")
        return item

    def generate_graph(self, *inputs: Any, target_tensors: Sequence[Any] = (), return_intermediate: bool = False,
                       graph_name: str = "default_graph", compiler_cfg: Any = None, trace_only: bool = False,
                       verify_cfg: Any = None) -> Tuple[Any, Tuple[Any, ...], Dict[str, torch.Tensor], Tuple[Any, ...],
                                                        Optional[Any]]:
        """Trace the modules on this device into a graph for ``inputs`` (TT-Buda's generate_graph).

        Returns ``(graph, outputs, intermediates, inputs, targets)``: the graph of the first module (the
        modules of a device are chained; each later one is traced on the previous one's outputs), its output
        tensors, ``{node name: value}`` of every node when ``return_intermediate`` (else empty), the inputs as
        pybuda Tensors, and None (targets are for training). ``trace_only`` skips computing values.
        """
        from pybuda.compile import module_to_graph
        from pybuda.tensor import Tensor, _as_torch
        from pybuda.verify import run_graph_on_cpu

        if target_tensors:
            raise PybudaError("generate_graph traces the forward graph, which takes no target tensors (a training "
                              "session builds its backward from it: pybuda.run_training)")
        if not self.modules:
            raise PybudaError(f"TTDevice '{self.name}' has no modules; place one with place_module")
        values = [_as_torch(t) for t in inputs]
        first = None
        for module in (self._translated_modules or self.modules):
            captured = module_to_graph(module, values, graph_name=graph_name if first is None else None,
                                       config=compiler_cfg)
            if first is None:
                first = captured
            if module is not (self._translated_modules or self.modules)[-1]:
                values = list(captured.graph_outputs)
        graph = first.graph
        outputs: Tuple[Any, ...] = ()
        intermediates: Dict[str, torch.Tensor] = {}
        if not trace_only:
            outs, intermediates = run_graph_on_cpu(graph, first.graph_inputs, return_intermediates=True)
            outputs = tuple(Tensor.create_from_torch(o) for o in outs)
            if not return_intermediate:
                intermediates = {}
        return graph, outputs, intermediates, tuple(Tensor.create_from_torch(_as_torch(t)) for t in inputs), None

    def get_parameters(self, ignore_unused_parameters: bool = True) -> List[Any]:
        """The parameters of the modules on this device, as pybuda Parameters. With
        ``ignore_unused_parameters``, after a compile only those the compiled graphs use are listed."""
        from pybuda.module import PyBudaModule, PyTorchModule
        from pybuda.tensor import Parameter

        params: List[Any] = []
        for module in self.modules:
            if isinstance(module, PyBudaModule):
                params.extend(module.get_parameters())
            elif isinstance(module, PyTorchModule):
                params.extend(Parameter(p.detach(), requires_grad=p.requires_grad, name=n)
                              for n, p in module.module.named_parameters())
        if ignore_unused_parameters and self._artifact is not None:
            used = set(self._artifact.get_parameters())
            params = [p for p in params if p.get_name() in used]
        return params

    def get_all_parameters(self) -> Dict[str, Any]:
        """Every parameter's current value on this device, by name (as ``get_parameter_checkpoint``)."""
        return self.get_parameter_checkpoint()

    def get_dram_io_queues(self, queue_type: str) -> List[Any]:
        """The compiled host-visible queues of one kind: ``input``, ``output``, ``parameter`` or ``constant``
        (each a :class:`pybuda.netlist.host_io.QueueIO`: the netlist queue, its framework name and shapes,
        host-side TMs, microbatch layout). Training kinds (``target``, ``bw_input`` ...) raise."""
        kinds = {"input": "inputs", "output": "outputs", "parameter": "ram_queues", "constant": "ram_queues"}
        if queue_type in ("target", "bw_input", "bw_output", "intermediates"):
            raise PybudaError(f"get_dram_io_queues('{queue_type}'): {queue_type} queues belong to a training netlist, "
                              f"whose queues this inference record does not list; a training session's programs "
                              f"are in pybuda.runtime.training.current()")
        if queue_type not in kinds:
            raise InputError(f"get_dram_io_queues: unknown queue type '{queue_type}'; expected one of {list(kinds)}")
        if self._artifact is None:
            raise PybudaError(f"TTDevice '{self.name}' was not compiled; run initialize_pipeline first")
        out: List[Any] = []
        for stage in self._artifact.stages:
            host_io = stage.executor.host_io if hasattr(stage.executor, "host_io") else None
            if host_io is None:
                continue
            out.extend(q for q in getattr(host_io, kinds[queue_type])
                       if kinds[queue_type] != "ram_queues" or q.kind == queue_type)
        return out

    def _parameter_values(self) -> Dict[str, torch.Tensor]:
        from pybuda.module import PyBudaModule, PyTorchModule

        if self._artifact is not None:
            return {k: v.detach().clone() for k, v in self._artifact.get_parameters().items()}
        out: Dict[str, torch.Tensor] = {}
        for module in self.modules:
            if isinstance(module, PyBudaModule):
                out.update({p.get_name(): p.value() for p in module.get_parameters() if p.has_value()})
            elif isinstance(module, PyTorchModule):
                out.update({n: p.detach().clone() for n, p in module.module.named_parameters()})
        return out

    def _update_parameters(self, values: Mapping[str, torch.Tensor]) -> None:
        from pybuda.module import PyBudaModule

        if self._artifact is not None:
            self._artifact.update_parameters(values)
            return
        owners = {p.get_name(): (m, p) for m in self.modules if isinstance(m, PyBudaModule)
                  for p in m.get_parameters()}
        unknown = sorted(set(values) - set(owners))
        if unknown:
            raise InputError(f"TTDevice '{self.name}' has no parameter(s) {unknown} (before compile, only PyBuda "
                             f"module parameters can be set)")
        for k, v in values.items():
            if tuple(v.shape) != tuple(owners[k][1].shape.dims):
                raise InputError(f"TTDevice '{self.name}': parameter '{k}' has shape {list(owners[k][1].shape.dims)}, "
                                 f"got {list(v.shape)}")
        for k, v in values.items():
            owners[k][0].set_parameter(k, v)

    def shutdown_device(self) -> None:
        if self._artifact is not None:
            self._artifact.close()


class TTCluster(TTDevice):
    """A TTDevice spanning ``cluster_size`` chips of one card or system (TT-Buda's ``TTCluster``).

    ``cluster_size=0`` means every chip of the card the config targets (``device_config``: 2 for an n300, 32
    for a galaxy; one simulated chip otherwise). The modules are placed across the chips by the compiler, as
    on a TTDevice with ``num_chips``.
    """

    def __init__(self, name: str, cluster_size: int = 0, arch: Optional[Union[BackendDevice, str]] = None,
                 devtype: Optional[BackendType] = None, device_mode: Optional[DeviceMode] = None,
                 optimizer: Any = None, scheduler: Any = None, fp32_fallback: DataFormat = DataFormat.Float16_b,
                 mp_context: Any = None, module: Union[Any, List[Any], None] = None):
        if not isinstance(cluster_size, int) or isinstance(cluster_size, bool) or cluster_size < 0:
            raise ConfigError(f"TTCluster '{name}': cluster_size must be a non-negative int, got {cluster_size!r}")
        chips = cluster_size or _card_chips()
        super().__init__(name, num_chips=chips, arch=arch, devtype=devtype, device_mode=device_mode,
                         optimizer=optimizer, scheduler=scheduler, fp32_fallback=fp32_fallback,
                         mp_context=mp_context, module=module)


def _card_chips() -> int:
    """Chips of the card the global config targets (``device_config``), 1 without one."""
    from pybuda.arch import get_device_descriptor
    from pybuda.config import _get_global_compiler_config

    preset = _get_global_compiler_config().device_config
    return get_device_descriptor(device_config=preset).chip_count if preset else 1


def _chip_ids(name: str, num_chips: Optional[int], chip_ids: Optional[List[Any]]) -> List[Any]:
    if chip_ids:
        ids = list(chip_ids)
        if num_chips is not None and num_chips != len(ids):
            raise ConfigError(f"TTDevice '{name}': num_chips={num_chips} does not match chip_ids={ids}")
        return ids
    if num_chips is None:
        return [0]
    if not isinstance(num_chips, int) or isinstance(num_chips, bool) or num_chips < 0:
        raise ConfigError(f"TTDevice '{name}': num_chips must be a non-negative int, got {num_chips!r}")
    if num_chips == 0:
        return [0]  # "all detected chips": the one simulated chip
    return list(range(num_chips))
