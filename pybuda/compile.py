"""The compile entry points: the one path from a model to a netlist.

- :func:`module_to_graph` turns a module and its sample inputs into a graph: a PyBudaModule is traced, a
  PyTorchModule captured with ``torch.export`` (possibly split into CPU pre/post stages), a
  :class:`CapturedGraphModule` is already a graph. The runtime (pipeline start, device compile, CPU
  devices) and :func:`pybuda_compile` all go through it, so a model is captured once.
- :func:`compile_graph` compiles an ``ir.Graph`` through the CompileDepth stages of
  :mod:`pybuda.passes.pipeline` (the runtime calls it with a graph traced for one sample and
  ``graph.microbatch`` set);
- :func:`pybuda_compile` is TT-Buda's signature for a PyBudaModule / PyTorchModule (or a TTDevice holding
  one) and its sample inputs.

Nothing here runs the model on the CPU unless verification asks for it: sample outputs are computed on
first use (:class:`ModuleGraph`), and the compile gets sample inputs only when ``verify_cfg`` wants the
reference (:func:`pybuda.verify.verification_requested`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from pybuda.config import CompileDepth, CompilerConfig, _get_global_compiler_config
from pybuda.errors import CompileError, ConfigError, PybudaError
from pybuda.ir.graph import Graph
from pybuda.ir.lowered import BudaGraph
from pybuda.module import Module
from pybuda.passes.context import CompileContext
from pybuda.passes.pipeline import run_stages
from pybuda.tensor import as_tuple  # noqa: F401  (re-exported: callers of the compile entry points use it)

log = logging.getLogger(__name__)


@dataclass
class CompileSummary:
    """What the compile produced, in numbers."""

    graph_name: str
    device: str
    arch: str
    ir_ops: int = 0
    lowered_ops: int = 0
    fused_ops: int = 0
    queues: int = 0
    epochs: int = 0
    cores_per_epoch: List[int] = field(default_factory=list)
    ops_per_epoch: List[int] = field(default_factory=list)
    epoch_to_epoch_queues: int = 0
    balancer_policy: str = ""
    compile_seconds: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        """The summary as a JSON-friendly dict."""
        return dict(self.__dict__)

    def __str__(self) -> str:
        cores = self.cores_per_epoch
        lines = [f"graph '{self.graph_name}' on {self.device} ({self.arch}): {self.ir_ops} IR ops -> "
                 f"{self.lowered_ops} device ops ({self.fused_ops} fused), {self.queues} queues",
                 f"{self.epochs} epoch(s), {self.epoch_to_epoch_queues} epoch-to-epoch queue(s), "
                 f"policy {self.balancer_policy}"]
        if cores:
            lines.append(f"cores per epoch: min {min(cores)}, max {max(cores)}, mean {sum(cores) / len(cores):.1f} "
                         f"-> {cores if len(cores) <= 16 else str(cores[:16])[:-1] + ', ...]'}")
        lines.append(f"compile time {self.compile_seconds:.2f} s")
        return "\n".join(lines)


@dataclass
class CompileResults:
    """Everything a compile produced (TT-Buda's CompileResults, plus the intermediate objects).

    ``outputs`` are the compiled graph's outputs on the CPU reference (the lowered graph once it exists)
    and ``golden_outputs`` the initial graph's, both only when verification was asked for and the inputs
    had values.
    """

    initial_graph: Optional[Graph] = None
    graph: Optional[Graph] = None  # the last IR graph (per sample, before lowering)
    lowered_graph: Optional[BudaGraph] = None
    balancer_solution: Any = None
    placer_solution: Any = None
    netlist: Any = None
    # The host side of the netlist (pybuda.netlist.host_io.HostIO): with the netlist and the tensors it
    # names, all a backend reads.
    host_io: Any = None
    netlist_filename: Optional[str] = None
    config: Optional[CompilerConfig] = None
    device: Any = None
    microbatch: int = 1
    compile_depth: CompileDepth = CompileDepth.INIT_COMPILE
    stage_timings: Dict[str, float] = field(default_factory=dict)
    outputs: List[torch.Tensor] = field(default_factory=list)
    golden_outputs: List[torch.Tensor] = field(default_factory=list)
    summary: Optional[CompileSummary] = None
    input_host_tms: Dict[str, list] = field(default_factory=dict)
    output_host_tms: Dict[str, list] = field(default_factory=dict)
    consteval_trace: Dict[str, Any] = field(default_factory=dict)
    artifacts: Dict[str, str] = field(default_factory=dict)
    notes: Dict[str, Any] = field(default_factory=dict)

    @property
    def lowered(self) -> Optional[BudaGraph]:
        """Alias of ``lowered_graph``."""
        return self.lowered_graph

    @property
    def pass_specific_output_kwargs(self) -> Dict[str, Any]:
        """TT-Buda's extra outputs: placer solution, output host TMs and consteval trace."""
        return {"placer_solution": self.placer_solution, "output_host_tms": self.output_host_tms,
                "consteval_trace": self.consteval_trace}


# --- from a module to a graph ----------------------------------------------------------------------------------


class CapturedGraphModule(Module):
    """A module whose ``ir.Graph`` is already captured (the device part of a framework model).

    The pipeline start captures a PyTorch model once and places this on the TTDevice instead, so the
    device compile does not capture it again.
    """

    runs_natively_on_cpu = False

    def __init__(self, name: str, graph: Graph):
        super().__init__(name)
        # Module.__init__ may add the graph-name suffix; this module keeps the captured module's name.
        object.__setattr__(self, "name", name)
        self.graph = graph


@dataclass
class ModuleGraph:
    """A module turned into a graph for one set of sample inputs (what :func:`module_to_graph` returns).

    ``graph`` is the device graph; ``pre``/``post`` the CPU stages a captured PyTorch model was split into
    (None when the whole model is in the graph); ``flat_inputs`` the module's sample inputs as the flat
    tensor list ``pre`` (or the graph) takes; ``capture`` the torch frontend's ``CaptureResult``.

    The sample values that flow through (:attr:`graph_inputs`, :attr:`graph_outputs`, :attr:`outputs`)
    are computed on first use only: running a large model on the CPU reference takes as long as the
    compile, and most callers need only the graph.
    """

    graph: Graph
    flat_inputs: List[torch.Tensor]
    pre: Optional[Callable[..., Any]] = None
    post: Optional[Callable[..., Any]] = None
    capture: Any = field(default=None, repr=False)
    _graph_inputs: Optional[List[torch.Tensor]] = field(default=None, repr=False)
    _graph_outputs: Optional[List[torch.Tensor]] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Inputs whose sample holds NaN or infinity: data movement carries them (pybuda.passes.graph.nonfinite); and
        # inputs whose sample holds a mask's fill keep it out of block formats (mask_fills). The
        # samples are the graph's inputs only without a CPU stage before it (running one here would cost a model run).
        if self.pre is None:
            from pybuda.passes.graph.mask_fills import mark_fill_samples
            from pybuda.passes.graph.nonfinite import mark_nonfinite_samples

            mark_nonfinite_samples(self.graph, self.flat_inputs)
            mark_fill_samples(self.graph, self.flat_inputs)

    @property
    def graph_inputs(self) -> List[torch.Tensor]:
        """The graph's inputs for the sample: ``flat_inputs``, through ``pre`` when there is one."""
        if self._graph_inputs is None:
            if self.pre is None:
                self._graph_inputs = list(self.flat_inputs)
            else:
                with torch.no_grad():
                    self._graph_inputs = list(as_tuple(self.pre(*self.flat_inputs)))
        return self._graph_inputs

    @property
    def graph_outputs(self) -> List[torch.Tensor]:
        """The graph's outputs for the sample: from tracing when it computed them, else one run of the
        graph on the CPU reference."""
        if self._graph_outputs is None:
            from pybuda.verify import run_graph_on_cpu

            self._graph_outputs = list(run_graph_on_cpu(self.graph, self.graph_inputs))
        return self._graph_outputs

    @property
    def outputs(self) -> List[torch.Tensor]:
        """The module's outputs for the sample: :attr:`graph_outputs`, through ``post`` when there is one."""
        if self.post is None:
            return self.graph_outputs
        with torch.no_grad():
            return list(as_tuple(self.post(*self.graph_outputs)))


def module_to_graph(module: Module, samples: Sequence[Any], input_names: Optional[Sequence[str]] = None, *,
                    graph_name: Optional[str] = None, config: Optional[CompilerConfig] = None,
                    for_device: bool = False, allow_cpu_stages: bool = False, training: bool = False) -> ModuleGraph:
    """Turn ``module`` into a graph for the sample inputs ``samples`` (torch tensors, positional, or named
    by ``input_names``).

    - a :class:`PyBudaModule` is traced (values flow with the trace, so its outputs come for free);
    - a :class:`PyTorchModule` is captured with ``torch.export`` (:func:`pybuda.frontend.torch.capture`,
      with ``config``'s fallback settings; ``for_device``: ops the chip cannot run fall back to the CPU);
    - a :class:`CapturedGraphModule` already is a graph;
    - any other module must provide ``to_graph(*samples)`` returning a capture, a graph or
      ``(graph, outputs)``.

    A capture split into CPU pre/post stages is a CompileError unless ``allow_cpu_stages`` (only a
    pipeline can add the CPU devices that run them). ``training``: the split will be trained, so a PyTorch
    capture keeps each parameter on one side of it. Nothing is run on the CPU here; see
    :class:`ModuleGraph` for the sample values.
    """
    from pybuda.module import PyBudaModule, PyTorchModule
    from pybuda.tensor import Tensor

    samples = list(samples)
    names = list(input_names) if input_names else None
    if isinstance(module, CapturedGraphModule):
        return ModuleGraph(module.graph, samples)
    if isinstance(module, PyBudaModule):
        if names:
            object.__setattr__(module, "input_names", names)
        graph, outs = module.trace(*samples, graph_name=graph_name)
        flat = [t.value() if isinstance(t, Tensor) and t.has_value() else t for t in samples]
        known = [o.value() for o in outs] if all(o.has_value() for o in outs) else None
        # Some parameter had no value while tracing (the graph holds zeros for it): the outputs come
        # from a CPU run of the graph, if anyone asks.
        return ModuleGraph(graph, flat, _graph_outputs=known)
    if isinstance(module, PyTorchModule):
        from pybuda.frontend.torch import capture

        args = dict(zip(names, samples)) if names else tuple(samples)
        result = capture(module, args, graph_name=graph_name or module.name, config=config, for_device=for_device,
                         training=training)
    else:
        to_graph = getattr(module, "to_graph", None)
        if to_graph is None:
            raise CompileError(f"module '{module.name}' of type {type(module).__name__} cannot be compiled for a "
                               f"device", stage="GENERATE_INITIAL_GRAPH")
        # Frontends take the compile's settings: the fallback config, and whether the graph is for the chip.
        result = to_graph(*samples, graph_name=graph_name or module.name, config=config, for_device=for_device)
        if not hasattr(result, "split_for_devices"):
            graph, outs = (result[0], result[1] if len(result) > 1 else None) if isinstance(result, tuple) \
                else (result, None)
            known = [o.value() if isinstance(o, Tensor) else o for o in outs] if outs is not None else None
            return ModuleGraph(graph, samples, _graph_outputs=known)
    # A torch-frontend CaptureResult.
    pre, graph, post = result.split_for_devices()
    if (pre is not None or post is not None) and not allow_cpu_stages:
        raise CompileError(f"module '{module.name}' needs CPU fallback devices, which only a pipeline "
                           f"(initialize_pipeline / run_inference) can add", stage="GENERATE_INITIAL_GRAPH")
    flat = result.flatten_inputs(**dict(zip(names, samples))) if names else result.flatten_inputs(*samples)
    return ModuleGraph(graph, flat, pre, post, capture=result)


# --- compiling a graph -------------------------------------------------------------------------------------------


def _descriptor(config: CompilerConfig, arch: Any = None, device_config: Optional[str] = None,
                num_chips: Optional[int] = None):
    """A device descriptor with the config's harvesting: ``harvested_rows`` (NoC rows, TT-Buda's option)
    become a mask only once the arch is known; otherwise ``harvesting_mask`` applies."""
    from pybuda.arch import get_device_descriptor

    chips = config.num_chips if num_chips is None else num_chips
    if config.backend_device_descriptor_path:
        return descriptor_from_file(config.backend_device_descriptor_path, arch, chips)
    if not config.harvested_rows:
        return get_device_descriptor(arch, device_config=device_config, harvesting_mask=config.harvesting_mask,
                                     num_chips=chips)
    base = get_device_descriptor(arch, device_config=device_config, num_chips=chips)
    return get_device_descriptor(arch, device_config=device_config,
                                 harvesting_mask=config.resolved_harvesting_mask(base.arch), num_chips=chips)


def descriptor_from_file(path: str, arch: Any = None, num_chips: int = 1):
    """The device descriptor in the ``device_desc.yaml`` at ``path`` (``backend_device_descriptor_path``):
    ConfigError when it is missing or malformed, or describes another arch than ``arch``. A chip count other
    than 1 replaces the file's (as for presets)."""
    from pybuda.arch.descriptor import _as_arch, with_chips
    from pybuda.backend_build.descriptors import read_device_descriptor

    desc = read_device_descriptor(str(path))
    if arch is not None and desc.arch != _as_arch(arch):
        raise ConfigError(f"backend_device_descriptor_path '{path}' describes a {desc.arch.value} device; this compile "
                          f"is for {_as_arch(arch).value}")
    return with_chips(desc, num_chips) if num_chips and num_chips != 1 else desc


def resolve_device(device: Any, config: CompilerConfig):
    """A DeviceDescriptor from a descriptor, a preset/arch name, a BackendDevice or a TTDevice."""
    from pybuda.arch.types import BackendDevice

    if device is None:
        if config.device_config:
            return _descriptor(config, device_config=config.device_config)
        raise CompileError("no device to compile for: pass a device descriptor, a preset name (e.g. 'wh_n150') "
                           "or set device_config", stage="INIT_COMPILE")
    if hasattr(device, "grid_rows") and hasattr(device, "arch"):
        return device
    if isinstance(device, str):
        from pybuda.arch import PRESETS

        if device.lower() in PRESETS:
            return _descriptor(config, device_config=device.lower())
        return _descriptor(config, arch=device)
    if isinstance(device, BackendDevice):
        return _descriptor(config, arch=device, device_config=config.device_config)
    arch = getattr(device, "arch", None)
    if arch is not None:  # a TTDevice: its arch, with the config's card preset when it is of that arch
        chips = max(1, int(getattr(device, "num_chips", 1) or 1))
        try:
            return _descriptor(config, arch=arch, device_config=config.device_config, num_chips=chips)
        except PybudaError:
            return _descriptor(config, arch=arch, num_chips=chips)
    raise CompileError(f"cannot compile for {device!r}: expected a DeviceDescriptor, a preset name or a TTDevice",
                       stage="INIT_COMPILE")


def compile_graph(graph: Graph, device: Any, config: Optional[CompilerConfig] = None, verify_cfg: Any = None,
                  microbatch: int = 1, *, inputs: Optional[Sequence[torch.Tensor]] = None,
                  microbatch_count: int = 1, epoch_type: str = "fwd") -> CompileResults:
    """Compile ``graph`` for ``device`` through the CompileDepth stages (up to ``config.compile_depth``).

    ``device``: a DeviceDescriptor, a preset name (``"gs_e150"``, ``"wh_n150"`` ...), an arch name or a
    BackendDevice. ``config`` defaults to the global CompilerConfig; it is snapshotted, so later edits do not
    affect this compile. An explicit ``config`` is used as given: the environment's PYBUDA_* settings reach
    a compile only through the global config (applied once, when it was created). ``epoch_type``: ``fwd``,
    or ``bwd``/``opt`` for a training backward/optimizer graph (its epochs and program are named so). ``microbatch``: samples
    per device run (graph inputs have dim 0 equal to it, or 1 when traced for one sample). ``inputs``
    (optional tensors in ``graph.inputs`` order) give golden and compiled CPU-reference outputs, checked
    against each other when ``verify_cfg`` asks for it. Raises CompileError naming the stage (and op).
    """
    start = time.perf_counter()
    cfg = (config if config is not None else _get_global_compiler_config()).snapshot()
    dev = resolve_device(device, cfg)
    ctx = CompileContext(config=cfg, device=dev, microbatch=int(microbatch or getattr(graph, "microbatch", 1) or 1),
                         microbatch_count=int(microbatch_count), graph_name=graph.name, epoch_type=epoch_type)
    results = CompileResults(config=cfg, device=dev, microbatch=ctx.microbatch)
    state = run_stages(graph, ctx, results, verify_cfg, inputs)
    results.summary = _summary(state, time.perf_counter() - start)
    return results


def _summary(s: Any, seconds: float) -> CompileSummary:
    r = s.results
    dev = s.ctx.device
    summary = CompileSummary(graph_name=s.ctx.graph_name, device=str(getattr(dev, "name", dev)),
                             arch=s.ctx.arch_name, compile_seconds=seconds)
    summary.ir_ops = len(r.initial_graph.ops) if r.initial_graph is not None else len(s.graph.ops)
    if s.bg is not None:
        summary.lowered_ops = len(s.bg.ops)
        summary.fused_ops = sum(1 for op in s.bg.ops.values() if op.type == "fused_op")
        summary.queues = len(s.bg.queues)
    if r.balancer_solution is not None:
        summary.balancer_policy = r.balancer_solution.policy
    ps = r.placer_solution
    if ps is not None:
        summary.epochs = len(ps.epochs)
        summary.ops_per_epoch = [len(e.ops) for e in ps.epochs]
        summary.cores_per_epoch = [sum(ps.op_placements[o].grid_size[0] * ps.op_placements[o].grid_size[1]
                                       for o in e.ops) for e in ps.epochs]
        summary.epoch_to_epoch_queues = len(ps.epoch_to_epoch_queues)
        summary.queues += len(ps.epoch_to_epoch_queues)
    return summary


def pybuda_compile(dev_or_module: Any, graph_name: str, *inputs: Any, targets: Sequence[Any] = (),
                   compiler_cfg: Optional[CompilerConfig] = None, verify_cfg: Any = None, losses: Any = None,
                   microbatch_size: int = 1, microbatch_count: int = 1) -> CompileResults:
    """TT-Buda's direct compile entry point for a PyBudaModule / PyTorchModule (or a TTDevice holding one).

    ``inputs`` are sample tensors (dim 0 = ``microbatch_size``); the module is traced (PyBuda) or captured
    (PyTorch) with them (:func:`module_to_graph`) and compiled for the device (a TTDevice's arch, else
    ``compiler_cfg.device_config``, else Grayskull e150). The model runs on the CPU reference only when
    ``verify_cfg`` asks for verification. ``targets``/``losses`` (a training compile) are a CompileError that
    says how to train instead.
    """
    from pybuda.module import PyBudaModule, PyTorchModule
    from pybuda.verify import verification_requested

    cfg = compiler_cfg if compiler_cfg is not None else _get_global_compiler_config()
    if targets or losses:
        from pybuda.passes.pipeline import TRAINING_ROUTE

        raise CompileError(f"pybuda_compile compiles for inference, so it takes no targets or losses; {TRAINING_ROUTE}",
                           stage="INIT_COMPILE")
    module, device = dev_or_module, None
    if not isinstance(dev_or_module, (PyBudaModule, PyTorchModule)):
        modules = getattr(dev_or_module, "modules", None)
        if not modules:
            raise CompileError(f"pybuda_compile: {dev_or_module!r} is neither a module nor a device holding one",
                               stage="INIT_COMPILE")
        module, device = modules[0], dev_or_module
    if device is None:
        device = cfg.device_config or "gs_e150"
    tensors = [t.value() if hasattr(t, "value") and callable(t.value) and not isinstance(t, torch.Tensor) else t
               for t in inputs]
    t0 = time.perf_counter()
    try:
        # A CPU pre stage (ops split off a PyTorch model) runs before the graph on the CPU; only the
        # device graph is compiled.
        captured = module_to_graph(module, tensors, graph_name=graph_name, config=cfg, allow_cpu_stages=True)
    except CompileError:
        raise
    except PybudaError as e:
        raise CompileError(str(e), stage="GENERATE_INITIAL_GRAPH") from e
    trace_seconds = time.perf_counter() - t0
    graph = captured.graph
    graph.microbatch = microbatch_size
    samples = captured.graph_inputs if verification_requested(verify_cfg) else None
    results = compile_graph(graph, device, cfg, verify_cfg, microbatch_size, inputs=samples,
                            microbatch_count=microbatch_count)
    results.stage_timings["GENERATE_INITIAL_GRAPH"] = results.stage_timings.get("GENERATE_INITIAL_GRAPH", 0.0) + \
        trace_seconds
    return results
