"""The execution-backend seam: how a device turns its modules into something that runs.

A TTDevice (and a CPUDevice holding PyBuda modules) calls :func:`compile_modules` once, with the
first pushed inputs as the sample, and gets a :class:`CompiledArtifact`. Running an input is then
``artifact.run(list_of_torch_tensors) -> list_of_torch_tensors``. An artifact is a chain of
:class:`CompiledStage` (one per module placed on the device), each driven by an :class:`Executor`.

Microbatch convention (TT-Buda's): dim 0 of every pushed tensor is the microbatch size ``mb``. A
TTDevice traces and compiles its modules for **one** sample (dim 0 narrowed to 1; the graph carries
``graph.microbatch = mb``) and an executor then runs all ``mb`` samples of a push. Outputs come back
with ``mb`` along dim 0 (per-sample outputs concatenated along dim 0; 0-d outputs stacked). A
CPUDevice has no microbatch notion: it traces PyBuda modules for the whole pushed tensor.

Executor contract (what a backend provides to run compiled netlists)
---------------------------------------------------------------------
``pybuda/golden/executor.py`` (the simulated chip; a silicon backend would be a second one) defines::

    def create_executor(compile_results, *, microbatch: int, device) -> Executor

* ``compile_results``: the ``CompileResults`` that ``pybuda.compile.compile_graph`` returned
  for one graph. The golden executor reads from it only the netlist, the host-I/O record
  ``.host_io`` (:class:`pybuda.netlist.host_io.HostIO`: queues, host TMs, parameters) and the tensors that
  record names (``pybuda.golden.executor.executor_inputs``), plus ``.config``; the executor must not need
  the model's Python code or the compiler's in-memory graphs.
* ``microbatch``: ``mb`` above (also ``compile_results.microbatch``). ``device``: the
  :class:`pybuda.arch.DeviceDescriptor` compiled for (arch, harvesting, chip count).
* The returned object has

  - ``run(inputs: list[torch.Tensor]) -> list[torch.Tensor]``: one call per push. ``inputs`` follow
    the order of ``compile_results.initial_graph.inputs`` (the graph the runtime traced), each of shape
    ``(mb * s0, *rest)`` where ``(s0, *rest)`` is that graph input's per-sample shape, in the dtype that
    was pushed. They are framework tensors: the executor applies the host-side TMs, pads to tiles and
    converts to each queue's data format itself. It returns one tensor per graph output, in order, in
    framework shape (padding removed, output host TMs applied), with ``mb`` folded into dim 0 as above,
    in the output's framework dtype (its ``QueueIO.dtype``: a bfloat16 model's float outputs as bfloat16,
    integer and boolean outputs as theirs) holding the values the chip would produce;
  - ``get_parameters() -> dict[str, torch.Tensor]``: current parameter values by graph node name;
  - ``update_parameters(params: Mapping[str, torch.Tensor]) -> None``: replace some of them; unknown
    names or wrong shapes raise :class:`pybuda.errors.InputError` before anything changes;
  - optionally ``close()``, called when the device shuts down.

  Calls come from one thread at a time (the device's worker). The executor is created inside the
  device's worker (in concurrent mode, inside the device process), so it never needs to be picklable.
  Exceptions it raises stop the pipeline and reach the user (as RuntimeFailure in concurrent mode).

Golden TTDevices run on the golden executor. Other devtypes (Model, Versim ...) run on
:class:`CPUReferenceExecutor`: the traced graph executed with the ops' torch references (after a full
compile, so compile errors still show).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, runtime_checkable

import torch

from pybuda.errors import CompileError, InputError, PybudaError

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of one device input or output (shape includes the microbatch dim)."""

    name: str
    shape: Tuple[int, ...]
    dtype: torch.dtype


@runtime_checkable
class Executor(Protocol):
    """Runs one compiled graph (see the module docstring for the full contract)."""

    def run(self, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]: ...

    def get_parameters(self) -> Dict[str, torch.Tensor]: ...

    def update_parameters(self, params: Mapping[str, torch.Tensor]) -> None: ...


def fold_microbatch(per_sample: List[List[torch.Tensor]]) -> List[torch.Tensor]:
    """Join per-sample outputs into microbatch outputs: concatenate along dim 0 (stack 0-d tensors)."""
    if len(per_sample) == 1:
        return list(per_sample[0])
    out = []
    for parts in zip(*per_sample):
        out.append(torch.stack(parts) if parts[0].dim() == 0 else torch.cat(parts, dim=0))
    return out


def batched_shape(shape: Sequence[int], microbatch: int) -> Tuple[int, ...]:
    """Shape of a per-sample tensor after :func:`fold_microbatch` over ``microbatch`` samples."""
    shape = tuple(shape)
    if microbatch == 1:
        return shape
    if not shape:
        return (microbatch,)
    return (shape[0] * microbatch,) + shape[1:]


def one_sample(tensors: Sequence[torch.Tensor], microbatch: int) -> List[torch.Tensor]:
    """The first sample of a push of ``microbatch`` samples folded along dim 0 (:func:`fold_microbatch`): a
    pushed tensor gives its first row, a CPU stage's per-sample ``[s0, ...]`` output (T5's position bias,
    ``[mb * s0, ...]`` folded) its first ``s0`` rows; one whose dim 0 the microbatch does not divide is whole."""
    return [t[:t.shape[0] // microbatch] if t.dim() and t.shape[0] % microbatch == 0 else t for t in tensors]


def split_microbatch(inputs: Sequence[torch.Tensor], per_sample_shapes: Sequence[Sequence[int]],
                     what: str) -> List[List[torch.Tensor]]:
    """Cut full-microbatch inputs into per-sample lists matching ``per_sample_shapes``.

    An input already of the per-sample shape is one sample. Raises InputError when an input is not
    ``(k * s0, *rest)`` for the per-sample ``(s0, *rest)``, or the inputs disagree on ``k``.
    """
    if len(inputs) != len(per_sample_shapes):
        raise InputError(f"{what} takes {len(per_sample_shapes)} input(s), got {len(inputs)}")
    counts = []
    for i, (t, shape) in enumerate(zip(inputs, per_sample_shapes)):
        shape = tuple(shape)
        if tuple(t.shape) == shape:
            counts.append(1)
            continue
        ok = len(shape) >= 1 and t.dim() == len(shape) and tuple(t.shape[1:]) == shape[1:] \
            and shape[0] > 0 and t.shape[0] % shape[0] == 0
        if not ok:
            raise InputError(f"{what}: input {i} has shape {list(t.shape)}, expected {list(shape)} "
                             f"with the microbatch along dim 0")
        counts.append(t.shape[0] // shape[0])
    k = counts[0] if counts else 1
    if any(c != k for c in counts):
        raise InputError(f"{what}: inputs disagree on the microbatch size (dim 0): {counts}")
    if k == 1:
        return [list(inputs)]
    return [[t[j * s[0]:(j + 1) * s[0]] for t, s in zip(inputs, per_sample_shapes)] for j in range(k)]


class CPUReferenceExecutor:
    """Runs an ``ir.Graph`` with the op registry's torch references (``verify.run_graph_on_cpu``).

    Used by CPUDevice for PyBuda modules, and by TTDevice until a chip-numerics backend is plugged
    in. It loops over the samples of a microbatch (see the module docstring).
    """

    def __init__(self, graph, microbatch: int = 1):
        self.graph = graph
        self.microbatch = microbatch
        self._input_shapes = [tuple(n.shape) for n in graph.inputs]
        self._params: Dict[str, torch.Tensor] = {n.name: graph.tensors[n.name] for n in graph.parameters
                                                 if n.name in graph.tensors}

    def run(self, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        from pybuda.verify import run_graph_on_cpu

        samples = split_microbatch(inputs, self._input_shapes, f"graph '{self.graph.name}'")
        outs = [run_graph_on_cpu(self.graph, s, self._params) for s in samples]
        return fold_microbatch(outs)

    def get_parameters(self) -> Dict[str, torch.Tensor]:
        return dict(self._params)

    def update_parameters(self, params: Mapping[str, torch.Tensor]) -> None:
        _check_parameter_update(self._params, params, self.graph.name)
        for name, value in params.items():
            self._params[name] = value.detach().clone()

    def close(self) -> None:
        pass


def _check_parameter_update(current: Mapping[str, torch.Tensor], params: Mapping[str, torch.Tensor],
                            where: str) -> None:
    for name, value in params.items():
        if name not in current:
            raise InputError(f"'{where}' has no parameter '{name}'; it has {sorted(current)}")
        if not isinstance(value, torch.Tensor):
            raise InputError(f"parameter '{name}': expected a torch tensor, got {type(value).__name__}")
        if tuple(value.shape) != tuple(current[name].shape):
            raise InputError(f"parameter '{name}' has shape {list(current[name].shape)}, "
                             f"got a value of shape {list(value.shape)}")


def create_executor(devtype, compile_results: Any, *, graph=None, microbatch: int = 1, device=None) -> Executor:
    """The executor for one compiled graph on a device of type ``devtype`` (a ``BackendType``).

    ``BackendType.Golden`` with compile results uses the golden executor (contract in the module
    docstring); everything else runs ``graph`` on :class:`CPUReferenceExecutor`.
    """
    from pybuda.arch.types import BackendType

    if devtype == BackendType.Golden and compile_results is not None:
        from pybuda.golden.executor import create_executor as golden_executor

        return golden_executor(compile_results, microbatch=microbatch, device=device)
    if graph is None:
        raise PybudaError(f"no executor for devtype {devtype}: there is no graph to run on the CPU reference")
    return CPUReferenceExecutor(graph, microbatch)


#: Prefix of the graph outputs that carry tapped ops' values (as training's ``saved.`` outputs).
TAP_PREFIX = "intermediate."


def add_tap_outputs(graph: Any, module: Any, config: Any) -> Tuple[Any, List[str]]:
    """The graph to compile when intermediates are asked for, and the tapped op names.

    The ops named by the module's ``insert_tapout_queue_for_op`` handles and by the config's
    ``op_intermediates_to_save`` (those in this graph; :func:`check_intermediates_found` checks the rest
    across the pipeline) become extra graph outputs ``intermediate.<op>`` after the module's own outputs, so
    the compiled netlist writes them to output queues and the runtime routes them to the intermediates
    queue. A handle naming an op the module's graph lacks is a ModuleError naming the nearest ops. The
    traced graph is left as it is (a copy is returned when something is tapped)."""
    from pybuda.errors import ModuleError

    ops = {n.name for n in graph.ops}
    wanted: List[str] = []
    for handle in _tapout_handles(module):
        if handle.op_name not in ops:
            raise ModuleError(f"insert_tapout_queue_for_op: module '{module.name}' has no op '{handle.op_name}'"
                              f"{_nearest(handle.op_name, ops)}")
        if handle.output_index != 0:
            raise ModuleError(f"insert_tapout_queue_for_op: op '{handle.op_name}' of module '{module.name}' has one "
                              f"output (index 0); output_index {handle.output_index} does not exist")
        wanted.append(handle.op_name)
    wanted.extend(name for name in (getattr(config, "op_intermediates_to_save", None) or ()) if name in ops)
    tapped = list(dict.fromkeys(wanted))
    if not tapped:
        return graph, []
    graph = graph.copy()
    for name in tapped:
        graph.add_output(graph.unique_name(TAP_PREFIX + name), name)
    return graph, tapped


def _tapout_handles(module: Any) -> List[Any]:
    """The tap-out handles of ``module`` and of its PyBuda submodules (traced into the same graph)."""
    handles = list(getattr(module, "_user_inserted_tapout_queues", ()) or ())
    get_submodules = getattr(module, "get_submodules", None)
    for sub in (get_submodules() if get_submodules is not None else ()):
        handles.extend(_tapout_handles(sub))
    return handles


def _nearest(name: str, names: Any) -> str:
    import difflib

    close = difflib.get_close_matches(str(name), sorted(names), n=5, cutoff=0.5)
    return f"; nearest: {close}" if close else f"; its ops: {sorted(names)[:12]}"


def check_intermediates_found(tap_infos: Sequence[Mapping[str, Any]], config: Any) -> None:
    """Every ``op_intermediates_to_save`` name must be an op of some compiled graph of the pipeline:
    ConfigError naming it and the nearest op names otherwise. ``tap_infos``: each device's
    ``{"tapped": [...], "ops": [...]}`` (``Device.tap_info``)."""
    from pybuda.errors import ConfigError

    requested = list(getattr(config, "op_intermediates_to_save", None) or ())
    ops: set = set()
    tapped: set = set()
    for info in tap_infos:
        tapped.update(info.get("tapped", ()))
        ops.update(info.get("ops", ()))
    for name in requested:
        if name not in tapped:
            raise ConfigError(f"op_intermediates_to_save: no compiled graph has an op named '{name}'"
                              f"{_nearest(name, ops)}")


def _run_compiler(graph, device, config, verify_cfg, microbatch: int, inputs=None):
    """Compile ``graph`` for ``device`` (a DeviceDescriptor) with ``pybuda.compile.compile_graph``."""
    from pybuda.compile import compile_graph  # lazy: importing the compiler is not free

    return compile_graph(graph, device, config, verify_cfg, microbatch, inputs=inputs)


@dataclass
class CompiledStage:
    """One module as compiled for a device: its graph, the compiler's results and its executor."""

    module_name: str
    graph: Any  # ir.Graph
    compile_results: Any  # pybuda.compile.CompileResults, or None when not compiled
    executor: Executor
    input_names: List[str] = field(default_factory=list)
    #: Ops whose outputs the compiled graph also writes (intermediates queue), in order: the executor returns
    #: them after the module's outputs.
    tapped: List[str] = field(default_factory=list)

    def run(self, inputs: Sequence[torch.Tensor]) -> Tuple[List[torch.Tensor], List[Tuple[str, torch.Tensor]]]:
        """Run one push; returns the module's outputs and ``(op name, value)`` of each tapped op."""
        values = list(self.executor.run(inputs))
        if not self.tapped:
            return values, []
        n = len(values) - len(self.tapped)
        return values[:n], list(zip(self.tapped, values[n:]))


@dataclass
class CompiledArtifact:
    """What a device compiled: a chain of stages plus the pushed-input and output specs."""

    stages: List[CompiledStage]
    input_specs: List[TensorSpec]
    output_specs: List[TensorSpec]
    microbatch: int
    backend: str  # "golden", "cpu_reference", ...
    # Computes the outputs for the compile sample (the next device's sample): a CPU-reference run of the
    # last graph unless tracing gave them, so it is called only when someone needs them.
    sample_output_fn: Optional[Callable[[], List[torch.Tensor]]] = field(default=None, repr=False)
    _sample_outputs: Optional[List[torch.Tensor]] = field(default=None, repr=False)
    _intermediates: List[Tuple[str, torch.Tensor]] = field(default_factory=list, repr=False)
    #: Chips each running the compiled graphs on an equal share of every push (PYBUDA_N300_DATA_PARALLEL).
    data_parallel: int = 1
    #: ``(op, op type, why)`` of the ops that read across the samples of a push: non-empty when the graph
    #: holds the whole microbatch (``microbatch`` is then 1: one execution per push).
    batch_in_graph: List[Tuple[str, str, str]] = field(default_factory=list)

    @property
    def sample_outputs(self) -> List[torch.Tensor]:
        """Outputs for the compile sample, used as the next device's sample (shapes and dtypes matter):
        the single-sample outputs repeated over the microbatch. Computed on first use."""
        if self._sample_outputs is None:
            self._sample_outputs = list(self.sample_output_fn()) if self.sample_output_fn is not None else []
        return self._sample_outputs

    def run(self, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """Run one push (a full microbatch) through every stage in order. The values of tapped ops
        (intermediates) are kept for :meth:`take_intermediates`."""
        values = list(inputs)
        taps: List[Tuple[str, torch.Tensor]] = []
        for stage in self.stages:
            values, tapped = stage.run(values)
            taps.extend(tapped)
        self._intermediates = taps
        return values

    def run_stage(self, index: int, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """Run one push through stage ``index`` only (``TTDevice.set_active_subgraph``)."""
        values, self._intermediates = self.stages[index].run(inputs)
        return values

    def take_intermediates(self) -> List[Tuple[str, torch.Tensor]]:
        """``(op name, value)`` of every tapped op in the last run (once: a second call returns [])."""
        taps, self._intermediates = self._intermediates, []
        return taps

    @property
    def tapped_ops(self) -> List[str]:
        """Every op whose output goes to the intermediates queue, in stage order."""
        return [name for stage in self.stages for name in stage.tapped]

    def get_parameters(self) -> Dict[str, torch.Tensor]:
        out: Dict[str, torch.Tensor] = {}
        for stage in self.stages:
            out.update(stage.executor.get_parameters())
        return out

    def update_parameters(self, params: Mapping[str, torch.Tensor]) -> None:
        """Route each parameter to the stage that owns it; unknown names raise InputError."""
        owned = [(stage, stage.executor.get_parameters()) for stage in self.stages]
        known = {name for _, names in owned for name in names}
        unknown = sorted(set(params) - known)
        if unknown:
            raise InputError(f"unknown parameter(s) {unknown}; the device has {sorted(known)}")
        for stage, names in owned:
            mine = {k: v for k, v in params.items() if k in names}
            if mine:
                stage.executor.update_parameters(mine)

    @property
    def compile_results(self) -> List[Any]:
        return [s.compile_results for s in self.stages]

    def close(self) -> None:
        for stage in self.stages:
            close = getattr(stage.executor, "close", None)
            if close is not None:
                close()


#: Tolerances of :func:`check_samples_independent`: a batched and a per-sample float32 torch forward differ
#: only by reduction order.
SAMPLE_CHECK_RTOL = 1e-3
SAMPLE_CHECK_ATOL_REL = 1e-4


def check_samples_independent(module: Any, sample_inputs: Sequence[torch.Tensor], microbatch: int) -> None:
    """CompileError when a framework module (a PyTorch one in eval mode) mixes the samples of a microbatch.

    Superseded by the static analysis of the graph traced for the whole push (:func:`trace_whole_push`,
    :func:`pybuda.passes.graph.microbatch.batch_mixing_ops`) with which :func:`compile_modules` keeps such
    a model's microbatch inside its graph; kept only for a capture made for one sample, where no static
    analysis can see the batch.

    The device compiles a model for one sample and runs a microbatch sample by sample, which is exact only
    when no op reads across dim 0 (a concat, reshape or reduction over the batch). Two samples of the push
    are run together and alone in torch; outputs that differ are such an op, and a wrong number must not
    come back without an error. A module in training mode (a model to train) is probed in eval mode, so that
    dropout draws no masks: training compiles it for one sample too, and ``h - h.mean(0)`` trained on other
    numbers than torch's. (Batch norms on batch statistics are the trainer's own refusal.)"""
    torch_module = getattr(module, "module", None)
    if microbatch < 2 or not callable(getattr(module, "forward", None)):
        return
    if isinstance(torch_module, torch.nn.Module) and torch_module.training:
        modes = {m: m.training for m in torch_module.modules()}
        torch_module.eval()
        try:
            with torch.no_grad():
                check_samples_independent(module, sample_inputs, microbatch)
        finally:
            for m, mode in modes.items():
                m.training = mode
        return

    def rows(lo: int, hi: int) -> List[Any]:
        return [t[lo:hi] if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == microbatch else t
                for t in sample_inputs]

    try:
        whole = module.forward(*sample_inputs)
        alone = [module.forward(*rows(k, k + 1)) for k in (0, 1)]
    except Exception:  # noqa: BLE001 -- a model that cannot run on these slices is left to the compile
        return
    for j, out in enumerate(whole):
        # One sample's output, repeated per sample, must be the push's: a value with a batch-sized dim 0 of its
        # own (a parameter broadcast against the batch) gives per-sample outputs of another shape.
        one = alone[0][j] if j < len(alone[0]) else None
        if isinstance(out, torch.Tensor) and isinstance(one, torch.Tensor) and out.dim() and one.dim() \
                and (one.shape[0] * microbatch, *one.shape[1:]) != tuple(out.shape) \
                and not (one.shape == out.shape and torch.equal(one, out)):  # not one that ignores the samples
            raise CompileError(f"module '{module.name}' mixes the samples of a microbatch: its output {j} is "
                               f"{list(out.shape)} for the push of {microbatch} but {list(one.shape)} for one sample "
                               f"(a value whose dim 0 meets the batch's, such as a parameter broadcast against it). "
                               f"The device runs a microbatch sample by sample; compile it with microbatch 1 or run "
                               f"it on a CPUDevice", stage="INIT_COMPILE")
    try:
        together = module.forward(*rows(0, 2))
    except Exception:  # noqa: BLE001 -- a model that cannot run on these slices is left to the compile
        return
    for j, out in enumerate(together):
        parts = [a[j] if j < len(a) else None for a in alone]
        if not isinstance(out, torch.Tensor) or not all(isinstance(p, torch.Tensor) for p in parts):
            continue
        if all(p.shape == out.shape and torch.equal(p, out) for p in parts):
            continue  # an output that does not depend on the samples
        joined = torch.cat(parts) if all(p.dim() for p in parts) else None
        same = joined is not None and joined.shape == out.shape
        if same and (out.is_floating_point() or joined.is_floating_point()):
            scale = float(joined.detach().float().abs().nan_to_num().max()) if joined.numel() else 0.0
            same = torch.allclose(out.float(), joined.float(), rtol=SAMPLE_CHECK_RTOL,
                                  atol=SAMPLE_CHECK_ATOL_REL * max(1.0, scale), equal_nan=True)
        elif same:
            same = torch.equal(out, joined)
        if not same:
            raise CompileError(f"module '{module.name}' mixes the samples of a microbatch: its output {j} for two "
                               f"samples run together differs from the two run alone (an op over dim 0 such as a "
                               f"concat, reshape or reduction across the batch). The device runs a microbatch "
                               f"sample by sample; compile it with microbatch 1 or run it on a CPUDevice",
                               stage="INIT_COMPILE")


def trace_whole_push(modules: Sequence[Any], microbatch: int) -> bool:
    """Whether :func:`compile_modules` traces ``modules`` for the whole push (dim 0 = ``microbatch``) rather
    than for one sample: a single PyTorch module (``torch.export`` costs the same at any batch and the graph
    then shows which ops read across the batch), or a captured graph that was traced so."""
    from pybuda.compile import CapturedGraphModule
    from pybuda.module import PyTorchModule

    if microbatch < 2 or len(modules) != 1:
        return False
    module = modules[0]
    if isinstance(module, CapturedGraphModule):
        # The pipeline start marks a capture made for the whole push (its CPU pre-stage may have taken
        # the batch dim out of the device graph's inputs, so their shapes alone cannot tell).
        return bool(getattr(module.graph, "whole_push", False))
    return isinstance(module, PyTorchModule)


def compile_modules(modules: Sequence[Any], sample_inputs: Sequence[torch.Tensor], config, *, devtype,
                    device=None, microbatch: Optional[int] = None, verify_cfg=None,
                    input_names: Optional[Sequence[str]] = None, compile_for_device: bool = True) -> CompiledArtifact:
    """Compile the modules of one device, chained in order, for one sample push.

    ``sample_inputs`` is a full push. With ``compile_for_device`` (TTDevice) dim 0 is the microbatch:
    modules are traced for one sample (:func:`pybuda.compile.module_to_graph`) and each graph goes
    through ``compile_graph`` for ``device`` (a DeviceDescriptor), then gets an executor from
    :func:`create_executor`. Without it (CPUDevice) graphs are traced for the whole push and run on the
    CPU reference. The model runs on the CPU reference for the sample only when the next module, the
    next device (``CompiledArtifact.sample_outputs``) or ``verify_cfg`` needs its outputs.
    """
    from pybuda.arch.types import BackendType
    from pybuda.compile import module_to_graph
    from pybuda.verify import verification_requested

    samples = [t for t in sample_inputs]
    whole = False
    if compile_for_device:
        mb = microbatch if microbatch is not None else (samples[0].shape[0] if samples and samples[0].dim() else 1)
        whole = trace_whole_push(modules, mb)
        if not whole:
            samples = one_sample(samples, mb)
    else:
        mb = 1
    #: (op, op type, why) of the ops that read across the samples of the push, when the graph keeps them.
    batch_in_graph: List[Tuple[str, str, str]] = []
    verify = compile_for_device and verification_requested(verify_cfg)
    input_specs = [TensorSpec((input_names[i] if input_names and i < len(input_names) else f"input_{i}"),
                              tuple(t.shape), t.dtype) for i, t in enumerate(sample_inputs)]
    stages: List[CompiledStage] = []
    backend = "cpu_reference"
    names = input_names
    captured = None
    for i, module in enumerate(modules):
        if captured is not None:  # the previous module's outputs are this one's sample
            samples, names = captured.outputs, None
        captured = module_to_graph(module, samples, names)
        graph = captured.graph
        graph.microbatch = mb
        if whole:
            from pybuda.passes.graph.microbatch import batch_mixing_ops, describe_mixing

            batch_in_graph = [(n.name, "input", f"dim 0 is {n.shape[0] if n.shape else 'absent'}, not the "
                               f"microbatch {mb}") for n in graph.inputs if not n.shape or n.shape[0] != mb]
            batch_in_graph = batch_in_graph or batch_mixing_ops(graph, mb)
            if batch_in_graph:
                # Some op reads across the samples: the whole push is one execution of the graph, which
                # then holds the microbatch as an ordinary dim (never a CompileError or a wrong shape).
                log.info("module '%s' mixes the samples of its microbatch; the device runs the whole "
                         "microbatch of %d in one graph: %s", module.name, mb, describe_mixing(batch_in_graph))
                mb = graph.microbatch = 1
        results = None
        tapped: List[str] = []
        if compile_for_device:
            graph, tapped = add_tap_outputs(graph, module, config)
            # Sample inputs reach the compile only to verify it against the model's outputs on them: a
            # whole push (the compile's checks run it sample by sample, the golden backend as pushed);
            # a later module gets the previous one's outputs for the sample, repeated over the microbatch.
            checked = None
            if verify:
                checked = list(sample_inputs) if i == 0 or whole else \
                    fold_microbatch([list(captured.graph_inputs)] * mb)
            results = _run_compiler(graph, device, config, verify_cfg, mb, inputs=checked)
            executor = create_executor(devtype, results, graph=graph, microbatch=mb, device=device)
        else:
            executor = CPUReferenceExecutor(graph, 1)
        if not isinstance(executor, CPUReferenceExecutor):
            backend = getattr(devtype, "value", str(devtype))
        stages.append(CompiledStage(module.name, graph, results, executor, [n.name for n in graph.inputs], tapped))
    last = captured
    # The output specs come from the graph, so knowing them does not run the model.
    # A graph traced for the whole push already has the push's shapes.
    output_specs = [TensorSpec(f"output_{i}", tuple(n.shape) if whole else batched_shape(n.shape, mb), n.dtype)
                    for i, n in enumerate(last.graph.outputs)] if last is not None else []  # taps not included
    if devtype is not None and devtype != BackendType.Golden and compile_for_device:
        log.debug("devtype %s runs on the %s executor", devtype, backend)

    def sample_outputs() -> List[torch.Tensor]:
        outs = last.outputs if last is not None else samples
        if whole:  # traced for the whole push: these are its outputs
            return [t.detach() for t in outs]
        return fold_microbatch([[t.detach() for t in outs]] * mb)

    return CompiledArtifact(stages, input_specs, output_specs, mb, backend, sample_outputs,
                            batch_in_graph=batch_in_graph)
