"""Training on the simulated chip: the forward, backward and optimizer programs of a pipeline of devices.

``initialize_pipeline(training=True)`` builds a :class:`TrainingSession` over the pipeline (the user's
devices plus the CPU-fallback devices a split PyTorch model needs). Each device gets a trainer:

* a **TTDevice** compiles every module placed on it (and its loss module, last) into three programs, as
  TT-Buda did: the forward graph (which also returns the activations the backward needs), the backward
  graph (:func:`pybuda.passes.graph.autograd.build_training_graphs`) and one optimizer graph over all its
  trainable parameters (:meth:`pybuda.optimizers.Optimizer.build_update_graph`). Each is compiled by
  :func:`pybuda.compile.compile_graph` (lowered, balanced and placed in its own epochs), and the netlists
  are merged into **one training netlist** for the device (:mod:`pybuda.netlist.training`): programs
  ``run_fwd_K`` / ``run_bwd_K`` / ``run_opt_0``, parameters in ram queues that the forward and backward read
  and the optimizer writes, saved activations in DRAM queues from forward to backward, and gradient
  accumulation queues (``gradient_op``, in the accumulate format, zeroed by ``$p_zero_grad`` on the first
  microbatch after ``zero_grad``) that the optimizer reads. The golden device runs that netlist; the host
  pushes only inputs, targets and the gradients arriving from the next device, and pops only outputs,
  losses and input gradients. Where two programs hold a tensor in layouts no TM on the device can
  reconcile, that hand-off goes through the host instead (the report says how many gradients and
  parameters stay on the device). A program the compiler cannot place runs on the CPU reference instead,
  with a line in :attr:`TTTrainer.report`; its gradients are accumulated on the host in the accumulate
  format (Float32 where the compile is Float32, else Float16_b).
* a **CPUDevice** runs its torch modules (and CPU-fallback stages) with torch autograd; its
  ``optimizer_f`` builds a torch optimizer over them (fallback stages use the TTDevice optimizer's
  ``get_pytorch_optimizer``). Gradients cross the device boundary both ways: a device's backward gets the
  gradients of its outputs from the next device and returns those of its inputs to the previous one.

Training runs sequentially in the calling thread (the simulated chip has no concurrency to overlap).
Every microbatch's forward context waits in a FIFO until its backward; ``run_backward`` without a
forward waiting is an error in the caller, and so is asking for more inputs or targets than were pushed.
"""

from __future__ import annotations

import logging
import queue
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from pybuda.dtypes import DataFormat
from pybuda.errors import CompileError, InputError, ModuleError, PybudaError
from pybuda.ir.graph import RUNTIME_UPDATED
from pybuda.runtime.backend_api import CPUReferenceExecutor, create_executor, fold_microbatch, split_microbatch
from pybuda.runtime.device import Device, InputItem

log = logging.getLogger(__name__)


def accumulate_format(config: Any) -> DataFormat:
    """The format gradients accumulate in: the config's accumulate format, else Float32 when the compile is
    Float32, else Float16_b (TT-Buda's default for gradient accumulation queues)."""
    explicit = getattr(config, "default_accumulate_df", None)
    if explicit is not None:
        return explicit
    if getattr(config, "default_df_override", None) == DataFormat.Float32:
        return DataFormat.Float32
    return DataFormat.Float16_b


def _round(value: torch.Tensor, df: DataFormat) -> torch.Tensor:
    if df == DataFormat.Float32:
        return value
    from pybuda.golden.formats import quantize

    return quantize(value, df)


def _sum_over_samples(value: torch.Tensor, shape: Sequence[int], microbatch: int) -> torch.Tensor:
    """A per-sample gradient folded over the microbatch (``(mb * p0, ...)``) summed into one of ``shape``."""
    shape = tuple(shape)
    if tuple(value.shape) == shape:
        return value
    return value.reshape((microbatch,) + shape).sum(0)


# --- programs -------------------------------------------------------------------------------------------------


@dataclass
class Program:
    """One compiled graph of a trainer (forward, backward or optimizer) and where it runs."""

    name: str
    graph: Any
    executor: Any
    compile_results: Any = None
    placement: str = "device"  # "device", or "host: <why>" when the compiler could not place it

    def run(self, inputs: Sequence[Optional[torch.Tensor]],
            params: Optional[Mapping[str, int]] = None) -> List[Optional[torch.Tensor]]:
        """Outputs in graph-output order; on the device's training netlist, inputs and outputs that stay in
        device DRAM are None (``params``: the program's parameters, such as ``$p_zero_grad``)."""
        if isinstance(self.executor, NetlistProgram):
            return self.executor.run(list(inputs), params)
        return list(self.executor.run(list(inputs)))

    @property
    def on_device(self) -> bool:
        return self.compile_results is not None


def compile_program(name: str, graph: Any, *, epoch_type: str, device_desc: Any, devtype: Any, config: Any,
                    microbatch: int, run: bool = True) -> Program:
    """Compile ``graph`` for the device. A graph the compiler cannot place runs on the CPU reference (logged
    and reported, never silently). ``run=False`` compiles only (no executor; compile errors are raised)."""
    from pybuda.compile import compile_graph

    for node in graph.parameters:
        node.tags[RUNTIME_UPDATED] = True
    graph.microbatch = microbatch
    try:
        results = compile_graph(graph, device_desc, config, None, microbatch, epoch_type=epoch_type)
    except CompileError as e:
        if not run:
            raise
        log.warning("training program '%s' runs on the host CPU: %s", name, e)
        return Program(name, graph, CPUReferenceExecutor(graph, microbatch), None, f"host: {e}")
    executor = create_executor(devtype, results, graph=graph, microbatch=microbatch, device=device_desc) \
        if run else None
    return Program(name, graph, executor, results)


def compile_stage(name: str, graph: Any, *, input_grads: Sequence[str], device_desc: Any, devtype: Any, config: Any,
                  microbatch: int, run: bool = True) -> Tuple[Any, Program, Program]:
    """Autograd on one module's graph, then its forward and backward programs: ``(TrainingGraphs, fwd, bwd)``.
    ``config.enable_recompute`` makes the backward recompute activations instead of saving them."""
    from pybuda.passes.graph.autograd import build_training_graphs

    from pybuda.passes.graph.optimize_tms import DEVICE_RESIDENT

    tg = build_training_graphs(graph, recompute=bool(getattr(config, "enable_recompute", False)),
                               input_grads=list(input_grads))
    _add_sample_dim(tg.backward, list(tg.param_grads.values()))
    # Activations the forward saves stay in device DRAM for the backward (one training netlist): the
    # backward reads them in the forward's layout, so their TMs run on the device, not on a host.
    saved_from_forward = set(tg.saved_outputs_sources())
    for node in tg.backward.inputs:
        if node.name in saved_from_forward:
            node.tags[DEVICE_RESIDENT] = True
    common = dict(device_desc=device_desc, devtype=devtype, config=config, microbatch=microbatch, run=run)
    fwd = compile_program(f"fwd_{name}", tg.forward, epoch_type="fwd", **common)
    bwd = compile_program(f"bwd_{name}", tg.backward, epoch_type="bwd", **common)
    return tg, fwd, bwd


def compile_optimizer(name: str, optimizer: Any, shapes: Mapping[str, Sequence[int]], *, device_desc: Any,
                      devtype: Any, config: Any, run: bool = True) -> Tuple[Any, Program]:
    """The optimizer's update graph over the parameters ``shapes`` and its program: ``(UpdateGraph, opt)``."""
    from pybuda.passes.graph.optimize_tms import DEVICE_RESIDENT

    update = optimizer.build_update_graph({n: (tuple(s), torch.float32) for n, s in shapes.items()})
    for node in update.graph.inputs:  # gradients: read from the backward's accumulators on the device
        node.tags[DEVICE_RESIDENT] = True
    program = compile_program(f"opt_{name}", update.graph, epoch_type="opt", device_desc=device_desc,
                              devtype=devtype, config=config, microbatch=1, run=run)
    return update, program


# --- one training netlist per device ---------------------------------------------------------------------------


class TrainingDevice:
    """The simulated chip loaded with a device's training netlist
    (:func:`pybuda.netlist.training.build_training_netlist`): every program's parameter and constant queues
    written once; the programs' host sides are :class:`NetlistProgram` objects."""

    def __init__(self, training_netlist: Any, tensors: Mapping[str, Mapping[str, torch.Tensor]], fast: bool):
        from pybuda.golden.device import GoldenDevice
        from pybuda.netlist.host_io import to_device_layout

        self.training_netlist = training_netlist
        self.netlist = training_netlist.netlist
        self.device = GoldenDevice(self.netlist, fast=fast)
        for key, part in training_netlist.parts.items():
            for rec in part.host_io.ram_queues:
                if rec.queue in part.linked_rams:
                    continue
                value = tensors[key].get(rec.tensor)
                if value is None:
                    raise InputError(f"training netlist: no tensor '{rec.tensor}' for queue '{rec.queue}'")
                self.device.write_ram(part.queue_names[rec.queue], to_device_layout(rec, value)[0])

    def program(self, key: str) -> "NetlistProgram":
        return NetlistProgram(self, self.training_netlist.parts[key])


class NetlistProgram:
    """One program of a :class:`TrainingDevice`, with the executor contract of
    :mod:`pybuda.runtime.backend_api`: the host pushes the inputs that do not stay on the device, runs the
    program once (one microbatch) and pops the outputs that do not stay on the device."""

    def __init__(self, owner: TrainingDevice, part: Any):
        self.owner = owner
        self.part = part
        graph = owner.netlist.graphs[part.graphs[0]]
        self.microbatch = max(1, int(graph.input_count))
        transformed = part.host_io.transformed_parameters()
        self._params = {p.name: tuple(p.shape) for p in part.host_io.parameters
                        if p.name not in transformed and p.name not in part.linked_rams
                        and (part.host_io.queue(p.name) is not None)}

    def _queue(self, rec: Any) -> str:
        return self.part.queue_names[rec.queue]

    def run(self, inputs: Sequence[Optional[torch.Tensor]],
            params: Optional[Mapping[str, int]] = None) -> List[Optional[torch.Tensor]]:
        from pybuda.netlist.host_io import from_device_layout, to_device_layout, torch_dtype

        part, dev = self.part, self.owner.device
        recs = part.host_io.inputs
        if len(inputs) != len(recs):
            raise InputError(f"program {part.program} takes {len(recs)} input(s), got {len(inputs)}")
        for rec, x in zip(recs, inputs):
            if rec.name in part.linked_inputs:
                continue
            if x is None:
                raise InputError(f"program {part.program}: input '{rec.name}' is not on the device; pass its value")
            dev.push(self._queue(rec), to_device_layout(rec, x))
        dev.run_program(part.program, {"$p_loop_count": 1, **dict(params or {})})
        outs: List[Optional[torch.Tensor]] = []
        for rec in part.host_io.outputs:
            if rec.name in part.linked_outputs:
                outs.append(None)
                continue
            value = from_device_layout(rec, dev.pop(self._queue(rec), self.microbatch if rec.batched else 1))
            dtype = torch_dtype(rec.dtype)
            outs.append(value if dtype.is_floating_point else value.round().to(dtype))
        return outs

    def get_parameters(self) -> Dict[str, torch.Tensor]:
        """Parameters this program's host side writes (those another program owns on the device are left out)."""
        return {name: torch.zeros(shape) for name, shape in self._params.items()}

    def update_parameters(self, params: Mapping[str, torch.Tensor]) -> None:
        from pybuda.netlist.host_io import to_device_layout

        for name, value in params.items():
            if name not in self._params:
                raise InputError(f"program {self.part.program} has no parameter '{name}' written by the host")
            if tuple(value.shape) != self._params[name]:
                raise InputError(f"parameter '{name}' has shape {list(self._params[name])}, got {list(value.shape)}")
        for name, value in params.items():
            rec = self.part.host_io.queue(name)
            self.owner.device.write_ram(self._queue(rec), to_device_layout(rec, value)[0])

    def read_ram(self, queue: str) -> torch.Tensor:
        """Entry 0 of this program's queue ``queue`` (its own name), as the device holds it."""
        return self.owner.device.read_ram(self.part.queue_names[queue])

    def zero_ram(self, queue: str) -> None:
        q = self.owner.device.queues[self.part.queue_names[queue]]
        self.owner.device.write_ram(self.part.queue_names[queue], torch.zeros(q.entry_shape))

    def close(self) -> None:
        pass


def _output_rec(host_io: Any, name: str) -> Any:
    return next((r for r in host_io.outputs if r.name == name), None)


def _input_rec(host_io: Any, name: str) -> Any:
    return next((r for r in host_io.inputs if r.name == name), None)


def _param_rec(host_io: Any, name: str) -> Any:
    rec = host_io.queue(name)
    if rec is None or rec.kind != "parameter" or name in host_io.transformed_parameters():
        return None
    return rec


# --- TTDevice ---------------------------------------------------------------------------------------------------


@dataclass
class _Stage:
    """One module of a TTDevice compiled for training."""

    module_name: str
    graphs: Any  # autograd.TrainingGraphs
    forward: Program
    backward: Program
    n_inputs: int  # framework inputs (targets of a loss stage come after them)
    n_outputs: int  # the module's own outputs (the saved activations follow them)
    grad_inputs: List[int]  # indices of inputs whose gradients the backward returns
    is_loss: bool = False


@dataclass
class _Pending:
    """A forward that waits for its backward: per stage, its inputs and saved activations."""

    stage_values: List[Tuple[List[torch.Tensor], Dict[str, torch.Tensor]]]
    outputs: List[torch.Tensor]


class TTTrainer:
    """A TTDevice's training programs (see the module docstring)."""

    def __init__(self, device: Any, sample: InputItem, targets: Optional[InputItem], config: Any,
                 needs_input_grads: bool):
        from pybuda.compile import module_to_graph

        self.device = device
        self.config = config
        self.desc = device.get_device_config(config)
        self.microbatch = int(sample.tensors[0].shape[0]) if sample.tensors and sample.tensors[0].dim() else 1
        self.acc_df = accumulate_format(config)
        self.report: List[str] = []
        modules = list(device._translated_modules or device.modules)
        if device.loss_module is not None:
            modules.append(device.loss_module)
        values = [t[0:1] if t.dim() else t for t in sample.tensors]
        names = sample.names
        self.stages: List[_Stage] = []
        for i, module in enumerate(modules):
            is_loss = module is device.loss_module
            n_inputs = len(values)
            if is_loss:
                if targets is None:
                    raise InputError(f"TTDevice '{device.name}' holds loss module '{module.name}': push targets with "
                                     f"push_to_target_inputs or pass sample_targets")
                values = values + [t[0:1] if t.dim() else t for t in targets.tensors]
            captured = module_to_graph(module, values, names, graph_name=module.name, config=config)
            graph = captured.graph
            floats = [k for k, node in enumerate(graph.inputs[:n_inputs]) if node.dtype.is_floating_point]
            grad_inputs = floats if (i > 0 or needs_input_grads) else []
            tg, fwd, bwd = compile_stage(module.name, graph, input_grads=[graph.inputs[k].name for k in grad_inputs],
                                         device_desc=self.desc, devtype=device.devtype, config=config,
                                         microbatch=self.microbatch)
            self.stages.append(_Stage(module.name, tg, fwd, bwd, n_inputs, len(graph.outputs), grad_inputs, is_loss))
            for prog in (fwd, bwd):
                self.report.append(f"{prog.name}: {prog.placement}")
            if i + 1 < len(modules):
                values, names = list(captured.outputs), None
        self.sample_outputs = [t.detach() for t in captured.outputs] if not self.stages[-1].is_loss else []
        self.params: Dict[str, torch.Tensor] = {}
        self.shapes: Dict[str, Tuple[int, ...]] = {}
        for stage in self.stages:
            for name in stage.graphs.param_grads:
                self.params[name] = stage.graphs.forward.tensors[name].detach().clone().float()
                self.shapes[name] = tuple(self.params[name].shape)
        self._host_grads: Dict[str, torch.Tensor] = {}
        self._device_grads: set = set()  # parameters whose accumulator holds this accumulation's gradient
        self._zero_next: set = set()  # stages whose next backward zeroes their accumulators
        self._device_state: set = set()  # optimizer state the optimizer program writes in place
        self.optimizer_program: Optional[Program] = None
        self.update = None
        self.optimizer_state: Dict[str, torch.Tensor] = {}
        self.training_netlist = None
        self.training_device: Optional[TrainingDevice] = None
        self.saved_capacity = 0  # microbatches of saved activations the training netlist holds (0: no limit)
        if device.optimizer is not None and self.params:
            self._compile_optimizer(device.optimizer)
        self._build_training_netlist()
        if self.optimizer_program is not None:
            self._push_optimizer_inputs(with_params=True, with_state=True)

    @property
    def has_loss(self) -> bool:
        return bool(self.stages) and self.stages[-1].is_loss

    # --- optimizer ---
    def _compile_optimizer(self, optimizer: Any) -> None:
        chosen = self._optimized_names(optimizer)
        if not chosen:
            return
        self.update, self.optimizer_program = compile_optimizer(
            self.device.name, optimizer, {n: self.shapes[n] for n in chosen}, device_desc=self.desc,
            devtype=self.device.devtype, config=self.config)
        self.report.append(f"{self.optimizer_program.name}: {self.optimizer_program.placement}")
        self.optimizer_state = {k: v.detach().clone() for k, v in self.update.initial_state().items()}

    def _optimized_names(self, optimizer: Any) -> List[str]:
        wanted = getattr(optimizer, "parameters_to_optimize", None)
        if callable(wanted):
            wanted = wanted()
        if not wanted:
            return list(self.params)
        names = {p if isinstance(p, str) else p.get_name() for p in wanted}
        return [n for n in self.params if n in names]

    def _push_optimizer_inputs(self, with_params: bool, with_state: bool = False) -> None:
        """Hyper-parameters, and the optimizer state the host keeps (all of it with ``with_state``: state the
        optimizer program updates in place is written only once, before the first step)."""
        values = dict(self.update.hyperparameters())
        values.update({k: v for k, v in self.optimizer_state.items() if with_state or k not in self._device_state})
        if with_params:
            values.update({n: self.params[n] for n in self.update.param_outputs})
        owned = self.optimizer_program.executor.get_parameters()
        self.optimizer_program.executor.update_parameters({k: v for k, v in values.items() if k in owned})

    # --- the device's training netlist ---
    def _build_training_netlist(self) -> None:
        """Merge the device programs into one training netlist on one simulated chip (see
        :mod:`pybuda.netlist.training`); programs that run on the host keep their CPU executors."""
        from pybuda.arch.types import BackendType
        from pybuda.netlist import training as tn

        if self.device.devtype != BackendType.Golden:
            return
        capacity = max(1, int(getattr(self.config, "training_saved_microbatches", None)
                              or tn.DEFAULT_SAVED_MICROBATCHES))
        state_shapes = {k: tuple(v.shape) for k, v in self.optimizer_state.items()}
        try:
            built = assemble_training_netlist(self.stages, self.optimizer_program, self.update, self.shapes,
                                              state_shapes, microbatch=self.microbatch, acc_df=self.acc_df,
                                              device_desc=self.desc, saved_microbatches=capacity)
        except PybudaError as e:
            # A compiler bug must not stop training: the programs keep their own netlists (host hand-offs).
            log.warning("TTDevice '%s': no training netlist (%s); programs run from separate netlists",
                        self.device.name, e)
            self.report.append(f"training netlist: not built ({e})")
            return
        if built is None:
            return
        tnl, programs, tensors = built
        fast = bool(getattr(self.config, "golden_ignore_df_precision", False))
        self.training_device = TrainingDevice(tnl, tensors, fast)
        self.training_netlist = tnl
        self.saved_capacity = capacity if any(lk.kind == "saved" for lk in tnl.links) else 0
        for key, prog in programs.items():
            old = prog.executor
            prog.executor = self.training_device.program(key)
            if hasattr(old, "close"):
                old.close()
        self._device_state = {lk.target for lk in tnl.links if lk.kind == "state"}
        self.report.append(describe_training_netlist(tnl, len(self.params)))

    def _part(self, program: Program) -> Any:
        return program.executor.part if isinstance(program.executor, NetlistProgram) else None

    def _device_param_queue(self, param: str) -> Optional[Tuple[Program, Any]]:
        """(program, its ram record) of the device queue an optimizer step writes ``param`` into, if any."""
        if self.training_netlist is None:
            return None
        for lk in self.training_netlist.links:
            if lk.kind == "update" and lk.target == param:
                for k, stage in enumerate(self.stages):
                    if f"fwd{k}" == lk.target_part:
                        return stage.forward, stage.forward.executor.part.host_io.queue(lk.target)
        return None

    def performance(self, microbatch_count: int = 1, accumulation_steps: int = 1) -> Any:
        """The modelled training speed of this device's programs on its card
        (:class:`pybuda.perf.training.TrainingPerf`); PybudaError when a program runs on the host."""
        from pybuda.perf.training import estimate_training

        programs = [p for s in self.stages for p in (s.forward, s.backward)]
        programs += [self.optimizer_program] if self.optimizer_program is not None else []
        on_host = [p.name for p in programs if p.compile_results is None]
        if on_host:
            raise PybudaError(f"TTDevice '{self.device.name}': programs {on_host} run on the host CPU, so the card's "
                              f"training speed cannot be modelled (see the trainer's report)")
        if self.training_netlist is not None:
            return self._netlist_performance(microbatch_count, accumulation_steps)
        return estimate_training([s.forward.compile_results for s in self.stages],
                                 [s.backward.compile_results for s in self.stages],
                                 self.optimizer_program.compile_results if self.optimizer_program else None,
                                 microbatch=self.microbatch, microbatch_count=microbatch_count,
                                 accumulation_steps=accumulation_steps)

    def _netlist_performance(self, microbatch_count: int, accumulation_steps: int) -> Any:
        """The modelled speed of the programs of this device's training netlist."""
        programs = {p.executor.part.key: p for s in self.stages for p in (s.forward, s.backward)}
        if self.optimizer_program is not None:
            programs["opt"] = self.optimizer_program
        return training_netlist_performance(self.training_netlist, programs, self.desc, microbatch=self.microbatch,
                                            microbatch_count=microbatch_count,
                                            accumulation_steps=accumulation_steps)

    def check_room(self, waiting: int) -> None:
        """PybudaError unless ``waiting`` forwards can wait for their backward at once: their saved
        activations stay in the training netlist's DRAM queues, which hold ``saved_capacity`` microbatches."""
        if self.saved_capacity and waiting > self.saved_capacity:
            raise PybudaError(f"TTDevice '{self.device.name}': {waiting} forwards would wait for their backward, but "
                              f"its training netlist keeps saved activations for {self.saved_capacity} microbatches; "
                              f"run_backward after at most {self.saved_capacity} forwards")

    def refresh_hyperparameters(self) -> None:
        """Write the optimizer's current hyper-parameters (a scheduler changed the learning rate) to the
        device: no recompile."""
        if self.optimizer_program is not None:
            self.optimizer_program.executor.update_parameters(dict(self.update.hyperparameters()))

    # --- run ---
    def forward(self, inputs: Sequence[torch.Tensor], targets: Optional[Sequence[torch.Tensor]]) -> Tuple[
            List[torch.Tensor], _Pending]:
        values = list(inputs)
        pending = _Pending([], [])
        for stage in self.stages:
            stage_inputs = values + list(targets or ()) if stage.is_loss else values
            outs = stage.forward.run(stage_inputs)
            saved = self._saved_values(stage, stage_inputs, outs)
            pending.stage_values.append((stage_inputs, saved))
            values = outs[:stage.n_outputs]
        pending.outputs = values
        return values, pending

    @staticmethod
    def _saved_values(stage: _Stage, inputs: Sequence[torch.Tensor], outs: Sequence[torch.Tensor]) -> Dict[
            str, torch.Tensor]:
        tg = stage.graphs
        by_name = {node.name: v for node, v in zip(tg.forward.inputs, inputs)}
        by_name.update(zip(tg.saved_outputs_sources(), outs[stage.n_outputs:]))
        return {name: by_name[name] for name in tg.saved}

    def backward(self, pending: _Pending, output_grads: Optional[Sequence[torch.Tensor]]) -> List[torch.Tensor]:
        """Run the backward programs, last stage first; accumulate parameter gradients; return the
        gradients of the device's inputs (zeros where an input carries none)."""
        grads = list(output_grads) if output_grads is not None else None
        input_grads: List[torch.Tensor] = []
        for stage, (inputs, saved) in zip(reversed(self.stages), reversed(pending.stage_values)):
            outs = stage.graphs.forward.outputs[:stage.n_outputs]
            if grads is None:  # the loss stage: d(loss)/d(loss) = 1 for every sample
                grads = [torch.ones(_batched(n.shape, self.microbatch)) for n in outs]
            bwd_inputs = [g if g is not None else torch.zeros(_batched(n.shape, self.microbatch))
                          for g, n in zip(grads, outs)]
            bwd_inputs += [saved[name] for name in stage.graphs.saved]
            zero = stage.module_name in self._zero_next
            self._zero_next.discard(stage.module_name)
            results = stage.backward.run(bwd_inputs, {"$p_zero_grad": int(zero)})
            named = dict(zip([n.name for n in stage.graphs.backward.outputs], results))
            for param, out_name in stage.graphs.param_grads.items():
                if named[out_name] is None:  # accumulated on the device (its gradient accumulation queue)
                    self._device_grads.add(param)
                    continue
                g = _sum_over_samples(named[out_name], self.shapes[param], self.microbatch)
                previous = self._host_grads.get(param)
                self._host_grads[param] = _round(g if previous is None else previous + g, self.acc_df)
            input_grads = []
            for k, node in enumerate(stage.graphs.forward.inputs[:stage.n_inputs]):
                out_name = stage.graphs.input_grads.get(node.name)
                input_grads.append(named[out_name] if out_name is not None else None)
            grads = input_grads
        return [g if g is not None else None for g in input_grads]

    def zero_grad(self) -> None:
        """Start a new accumulation: the next backward of every stage zeroes its gradient accumulators."""
        self._host_grads = {}
        self._device_grads = set()
        self._zero_next = {stage.module_name for stage in self.stages}

    def _accumulators(self) -> Dict[str, Tuple[Program, str, Any]]:
        """parameter -> (backward program, its accumulator queue, the queue's output record)."""
        out: Dict[str, Tuple[Program, str, Any]] = {}
        for stage in self.stages:
            part = self._part(stage.backward)
            if part is None:
                continue
            turned = {lk.target: lk for lk in self.training_netlist.links if lk.kind == "grad" and lk.at_producer}
            for param, out_name in stage.graphs.param_grads.items():
                rec = _output_rec(part.host_io, out_name)
                if rec is not None and rec.name in part.linked_outputs:
                    layout = rec
                    if rec.queue in turned:  # the accumulator holds the optimizer's (transposed) layout
                        layout = self.optimizer_program.executor.part.host_io.queue(turned[rec.queue].alias)
                    out[param] = (stage.backward, rec.queue, layout)
        return out

    @property
    def grads(self) -> Dict[str, torch.Tensor]:
        """The gradients accumulated since the last zero_grad (read from the device's accumulators)."""
        from pybuda.netlist.training import read_ram_value

        out = dict(self._host_grads)
        for param, (prog, qname, rec) in self._accumulators().items():
            if param in self._device_grads:
                out[param] = read_ram_value(rec, prog.executor.read_ram(qname), self.shapes[param])
        return out

    def step(self) -> None:
        """One optimizer step on the device over the accumulated gradients."""
        if self.optimizer_program is None:
            return
        accumulators = self._accumulators()
        for param, (prog, qname, _) in accumulators.items():
            if param not in self._device_grads:  # no backward since zero_grad: the step sees a zero gradient
                prog.executor.zero_ram(qname)
                self._device_grads.add(param)
        names = list(self.update.param_outputs)
        grads = [None if n in accumulators else self._host_grads.get(n, torch.zeros(self.shapes[n])) for n in names]
        outs = self.optimizer_program.run(grads)
        named = dict(zip([n.name for n in self.update.graph.outputs], outs))
        new_params: Dict[str, torch.Tensor] = {}
        on_device: Dict[str, torch.Tensor] = {}
        for p, o in self.update.param_outputs.items():
            if named[o] is not None:
                new_params[p] = named[o].reshape(self.shapes[p])
                continue
            # Written in place on the device; the host keeps a copy for checkpoints and host-side programs.
            prog, rec = self._device_param_queue(p)
            from pybuda.netlist.training import read_ram_value

            on_device[p] = read_ram_value(rec, prog.executor.read_ram(rec.queue), self.shapes[p])
        for s, o in self.update.state_outputs.items():
            if named[o] is not None:
                self.optimizer_state[s] = named[o].reshape(self.optimizer_state[s].shape)
        self._store_parameters(on_device, skip_device=True)
        self.set_parameters(new_params)
        self._push_optimizer_inputs(with_params=False)

    def set_parameters(self, values: Mapping[str, torch.Tensor]) -> None:
        """New values of trainable parameters: into every program that reads them."""
        unknown = sorted(set(values) - set(self.params))
        if unknown:
            raise InputError(f"TTDevice '{self.device.name}' has no trainable parameter(s) {unknown}; it has "
                             f"{sorted(self.params)}")
        for k, v in values.items():
            if tuple(v.shape) != self.shapes[k]:
                raise InputError(f"TTDevice '{self.device.name}': parameter '{k}' has shape {list(self.shapes[k])}, "
                                 f"got {list(v.shape)}")
        self._store_parameters(values)

    def _store_parameters(self, values: Mapping[str, torch.Tensor], skip_device: bool = False) -> None:
        """Keep ``values`` as the host copy and write them into every program whose host side owns a copy;
        ``skip_device``: the values came from the device's own queue, which is left as it is."""
        if not values:
            return
        for k, v in values.items():
            self.params[k] = v.detach().clone().float()
        holders = {}
        if skip_device:
            holders = {k: found[0] for k in values if (found := self._device_param_queue(k)) is not None}
        programs = [p for stage in self.stages for p in (stage.forward, stage.backward)]
        programs += [self.optimizer_program] if self.optimizer_program is not None else []
        for prog in programs:
            owned = prog.executor.get_parameters()
            mine = {k: self.params[k] for k in values if k in owned and holders.get(k) is not prog}
            if mine:
                prog.executor.update_parameters(mine)

    def parameters(self) -> Dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.params.items()}


def assemble_training_netlist(stages: Sequence[Any], optimizer_program: Optional[Program], update: Any,
                              shapes: Mapping[str, Tuple[int, ...]], state_shapes: Mapping[str, Tuple[int, ...]], *,
                              microbatch: int, acc_df: DataFormat, device_desc: Any,
                              saved_microbatches: int = 0) -> Optional[Tuple[Any, Dict[str, Program], Dict[str, Any]]]:
    """One training netlist from a device's compiled programs: ``stages`` (each with ``graphs``, ``forward``
    and ``backward``), the optimizer program and its UpdateGraph. Programs without compile results (run on
    the host) are left out. Returns ``(TrainingNetlist, programs by part key, tensors by part key)``, or None
    when no program compiled; the netlist is validated (NetlistError for a compiler bug)."""
    from pybuda.golden.executor import executor_inputs
    from pybuda.netlist import training as tn
    from pybuda.netlist.validate import validate

    programs: Dict[str, Program] = {}
    parts: List[Any] = []
    tensors: Dict[str, Dict[str, torch.Tensor]] = {}

    def add(key: str, kind: str, name: str, prog: Optional[Program]) -> None:
        if prog is None or not prog.on_device:
            return
        netlist, host_io, values = executor_inputs(prog.compile_results)
        parts.append(tn.Part(key, kind, name, netlist, host_io))
        tensors[key] = values
        programs[key] = prog

    for k, stage in enumerate(stages):
        add(f"fwd{k}", "fwd", f"run_fwd_{k}", stage.forward)
    for k in reversed(range(len(stages))):
        add(f"bwd{k}", "bwd", f"run_bwd_{k}", stages[k].backward)
    add("opt", "opt", "run_opt_0", optimizer_program)
    if not parts:
        return None
    links = training_links({p.key: p for p in parts}, stages, update, shapes, state_shapes, microbatch,
                           tuple(device_desc.grid_size))
    saved = microbatch * max(1, saved_microbatches or tn.DEFAULT_SAVED_MICROBATCHES)
    tnl = tn.build_training_netlist(parts, links, microbatch=microbatch, acc_df=acc_df, saved_entries=saved)
    validate(tnl.netlist)
    return tnl, programs, tensors


def training_netlist_performance(tnl: Any, programs: Mapping[str, Program], device_desc: Any, *, microbatch: int,
                                 microbatch_count: int = 1, accumulation_steps: int = 1) -> Any:
    """The modelled training step (:class:`pybuda.perf.training.TrainingPerf`) of a training netlist's
    programs; ``programs`` (by part key) give each part's placer epochs, so graphs group as they were placed."""
    from pybuda.perf.model import placer_temporal_epochs
    from pybuda.perf.training import estimate_training_netlist

    temporal: Dict[str, int] = {}
    offset = 0
    for key, part in tnl.parts.items():
        own = (placer_temporal_epochs(programs[key].compile_results) or {}) if key in programs else {}
        old_names = list(part.netlist.graphs)
        for k, (old, new) in enumerate(zip(old_names, part.graphs)):
            temporal[new] = offset + own.get(old, k)
        offset = max(temporal.values(), default=-1) + 1
    fwd = [p for p in tnl.parts.values() if p.kind == "fwd"]
    bwd = [p for p in tnl.parts.values() if p.kind == "bwd"]
    opt = next((p.program for p in tnl.parts.values() if p.kind == "opt"), None)
    return estimate_training_netlist(tnl.netlist, device_desc, [p.program for p in fwd], [p.program for p in bwd], opt,
                                     microbatch=microbatch, microbatch_count=microbatch_count,
                                     accumulation_steps=accumulation_steps, temporal_epochs=temporal)


def model_training_step(name: str, graphs: Any, forward: Program, backward: Program, update: Any,
                        optimizer: Optional[Program], *, microbatch: int, acc_df: DataFormat,
                        microbatch_count: int = 1, accumulation_steps: int = 1) -> Tuple[Any, Any]:
    """One module's compiled programs (:func:`compile_stage`, :func:`compile_optimizer`, also with
    ``run=False``) as one training netlist and its modelled step: ``(TrainingNetlist, TrainingPerf)``. What
    ``pybuda benchmark -t`` needs to model the netlist a TTDevice would run."""
    device_desc = getattr(forward.compile_results, "device", None)
    stage = _Stage(name, graphs, forward, backward, len(graphs.forward.inputs), 0, [])
    shapes = {n: tuple(graphs.forward[n].shape) for n in graphs.param_grads}
    state = {k: tuple(v.shape) for k, v in update.initial_state().items()} if update is not None else {}
    built = assemble_training_netlist([stage], optimizer, update, shapes, state, microbatch=microbatch, acc_df=acc_df,
                                      device_desc=device_desc)
    if built is None:
        raise PybudaError(f"'{name}': no training program compiled for the device")
    tnl, programs, _ = built
    return tnl, training_netlist_performance(tnl, programs, device_desc, microbatch=microbatch,
                                             microbatch_count=microbatch_count, accumulation_steps=accumulation_steps)


def describe_training_netlist(tnl: Any, trainable: int) -> str:
    """One report line: epochs, programs, what stays on the device."""
    kinds = sorted({lk.kind for lk in tnl.links})
    in_place = sum(lk.kind == "update" for lk in tnl.links)
    return (f"training netlist: {len(tnl.netlist.graphs)} epochs, programs {[p.name for p in tnl.netlist.programs]}, "
            f"device links {kinds}; {len(tnl.accumulators)}/{trainable} gradients accumulate on the device, "
            f"{in_place}/{trainable} parameters are updated in place")


def training_links(parts: Mapping[str, Any], stages: Sequence[Any], update: Any, shapes: Mapping[str, Tuple[int, ...]],
                   state_shapes: Mapping[str, Tuple[int, ...]], microbatch: int, grid: Tuple[int, int]) -> List[Any]:
    """The queues the programs ``parts`` (keyed fwdK / bwdK / opt) can share on the device (see
    :mod:`pybuda.netlist.training`): ``stages`` hold each module's TrainingGraphs, ``update`` the optimizer's
    UpdateGraph (or None), ``shapes`` / ``state_shapes`` the parameters' and optimizer state's shapes."""
    from pybuda.netlist import training as tn

    links: List[Any] = []
    opt = parts.get("opt")
    for k, stage in enumerate(stages):
        fk, bk = f"fwd{k}", f"bwd{k}"
        fwd, bwd = parts.get(fk), parts.get(bk)
        if fwd is None:
            continue
        tg = stage.graphs
        if bwd is not None:
            for source, out_name in zip(tg.saved_outputs_sources(), tg.saved_outputs):
                orec, irec = _output_rec(fwd.host_io, out_name), _input_rec(bwd.host_io, source)
                if orec is None or irec is None:
                    continue
                # Two samples tell a per-sample layout from one that mixes samples; more only cost time.
                tms = tn.output_to_input(orec, irec, min(2, microbatch))
                link = _link(grid, "saved", fwd, orec.queue, bwd, irec.queue, tms)
                if link is not None:
                    links.append(link)
        for param, grad_out in tg.param_grads.items():
            shape = shapes[param]
            frec = _param_rec(fwd.host_io, param)
            if frec is None:
                continue
            brec = _param_rec(bwd.host_io, param) if bwd is not None else None
            if brec is not None:
                tms = tn.ram_to_ram(frec, brec, shape)
                if tms is not None and tn.readers_accept(bwd.netlist, brec.queue, tms):
                    links.append(tn.Link("param", fk, frec.queue, bk, brec.queue, tms))
            if opt is None or update is None or param not in update.param_outputs:
                continue

            def reshape(x: torch.Tensor, s: Tuple[int, ...] = shape) -> torch.Tensor:
                return x.reshape(s)
            if bwd is not None:
                grec = _output_rec(bwd.host_io, grad_out)
                orec = _input_rec(opt.host_io, update.grad_inputs[param])
                if grec is not None and orec is not None and tn.can_accumulate(bwd.netlist, grec.queue):
                    link = _link(grid, "grad", bwd, grec.queue, opt, orec.queue,
                                      tn.output_to_input(grec, orec, 1, reshape))
                    if link is not None:
                        links.append(link)
            prec = _param_rec(opt.host_io, param)
            if prec is None:
                continue
            tms = tn.ram_to_ram(frec, prec, shape)
            if tms is None or not tn.readers_accept(opt.netlist, prec.queue, tms):
                continue
            links.append(tn.Link("param", fk, frec.queue, "opt", prec.queue, tms))
            urec = _output_rec(opt.host_io, update.param_outputs[param])
            if tms == () and urec is not None and tn.plain_ram(frec, shape) \
                    and tn.output_to_input(urec, frec, 1, reshape) == ():
                links.append(tn.Link("update", fk, frec.queue, "opt", urec.queue))
    if opt is not None and update is not None:
        for state, out_name in update.state_outputs.items():
            srec, urec = _param_rec(opt.host_io, state), _output_rec(opt.host_io, out_name)
            shape = tuple(state_shapes[state])
            if srec is None or urec is None or not tn.plain_ram(srec, shape):
                continue
            if tn.output_to_input(urec, srec, 1, lambda x, s=shape: x.reshape(s)) == ():
                links.append(tn.Link("state", "opt", srec.queue, "opt", urec.queue))
    return links

def _link(grid: Tuple[int, int], kind: str, target: Any, target_queue: str, alias: Any, alias_queue: str,
          tms: Optional[Tuple[Any, ...]]) -> Any:
    """A link from an op-fed ``target_queue`` to ``alias_queue`` whose layouts are ``tms`` apart: the
    alias's readers apply them, or else the target's producer transposes; None when neither may."""
    from pybuda.netlist import training as tn

    if tms is None:
        return None
    if tn.readers_accept(alias.netlist, alias_queue, tms):
        return tn.Link(kind, target.key, target_queue, alias.key, alias_queue, tms)
    if [tm.name for tm in tms] == ["transpose"] and tn.can_transpose_producer(target.netlist, target_queue,
                                                                             grid):
        return tn.Link(kind, target.key, target_queue, alias.key, alias_queue, (), at_producer=True)
    return None



def _add_sample_dim(graph: Any, outputs: Sequence[str]) -> None:
    """Give each named output a leading dim of 1. Device outputs carry the microbatch in dim 0 (each sample's
    output is stacked there), so a parameter gradient of the parameter's own shape could not be told
    apart from its samples; as ``(1, *shape)`` the microbatch comes back as ``(mb, *shape)``."""
    wanted = set(outputs)
    kept = [(node.name, node.operands[0]) for node in graph.outputs]
    for name, _ in kept:
        graph.remove(name)
    for name, source in kept:
        if name in wanted:
            shape = tuple(graph[source].shape)
            source = graph.add_op(graph.unique_name(f"{name}.per_sample"), "reshape", [source],
                                  {"shape": (1,) + shape}).name
        graph.add_output(name, source)


def _batched(shape: Sequence[int], microbatch: int) -> Tuple[int, ...]:
    from pybuda.runtime.backend_api import batched_shape

    return batched_shape(shape, microbatch)


# --- CPUDevice ----------------------------------------------------------------------------------------------------


class HostTrainer:
    """A CPUDevice's modules trained with torch autograd (CPU-fallback stages included).

    A PyBudaModule (model or loss) is traced once for one sample and run per sample with the op registry's
    torch references, its parameters as torch leaves, so torch autograd trains it like a torch module."""

    def __init__(self, device: Any, sample: InputItem, targets: Optional[InputItem], optimizer_owner: Any):
        from pybuda.module import PyBudaModule, PyTorchModule
        from pybuda.runtime.stages import CpuFallbackModule

        self.device = device
        self.modules = list(device.modules)
        for m in self.modules:
            if not isinstance(m, (PyTorchModule, CpuFallbackModule, PyBudaModule)):
                raise ModuleError(f"CPUDevice '{device.name}': training module '{m.name}' ({type(m).__name__}) on a "
                                  f"CPUDevice is not supported; use a PyTorchModule or a PyBudaModule")
        self.loss = device.loss_module
        if self.loss is not None and not isinstance(self.loss, (PyTorchModule, PyBudaModule)):
            raise ModuleError(f"CPUDevice '{device.name}': its loss module must be a PyTorchModule (a torch loss) "
                              f"or a PyBudaModule, got {type(self.loss).__name__}")
        if self.loss is not None and targets is None:
            raise InputError(f"CPUDevice '{device.name}' holds loss module '{self.loss.name}': push targets with "
                             f"push_to_target_inputs or pass sample_targets")
        self.torch_params: Dict[str, torch.nn.Parameter] = {}
        self._graphs: Dict[int, Any] = {}  # id(PyBudaModule) -> its graph, traced for one sample
        for m in self.modules + ([self.loss] if self.loss is not None else []):
            for n, p in _module_parameters(m):
                if p.requires_grad:
                    self.torch_params.setdefault(n, p)
        self.optimizer = None
        self.scheduler = None
        params = list(dict.fromkeys(self.torch_params.values()))
        if getattr(device, "optimizer_f", None) is not None:
            target = self.modules[0].module if isinstance(self.modules[0], PyTorchModule) and \
                len(self.modules) == 1 else params
            self.optimizer = device.optimizer_f(target)
            if getattr(device, "scheduler_f", None) is not None:
                self.scheduler = device.scheduler_f(self.optimizer)
        elif optimizer_owner is not None and params:
            self.optimizer = optimizer_owner.get_pytorch_optimizer(params)
        self.has_loss = self.loss is not None
        outs, _ = self.forward(sample.tensors, targets.tensors if targets is not None else None, keep=False)
        self.sample_outputs = [o.detach() for o in outs]

    def forward(self, inputs: Sequence[torch.Tensor], targets: Optional[Sequence[torch.Tensor]],
                keep: bool = True) -> Tuple[List[torch.Tensor], Any]:
        leaves = [t.detach().float().requires_grad_(True) if t.is_floating_point() else t for t in inputs]
        values: List[torch.Tensor] = list(leaves)
        with torch.enable_grad():
            for m in self.modules:
                values = self._run(m, values)
            if self.loss is not None:
                values = list(self._run(self.loss, values + [t.detach().float() if t.is_floating_point() else t
                                                             for t in (targets or ())]))
        return [v.detach() for v in values], ((leaves, values) if keep else None)

    def _run(self, module: Any, values: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        from pybuda.module import PyBudaModule

        if not isinstance(module, PyBudaModule):
            return _run_torch(module, values)
        graph = self._graphs.get(id(module))
        if graph is None:
            from pybuda.compile import module_to_graph

            sample = [v[0:1].detach() if v.dim() else v.detach() for v in values]
            graph = module_to_graph(module, sample, graph_name=module.name).graph
            self._graphs[id(module)] = graph
        params = {name: self.torch_params.get(name, graph.tensors.get(name)) for name in graph.tensors}
        samples = split_microbatch(list(values), [n.shape for n in graph.inputs], f"module '{module.name}'")
        return fold_microbatch([_eval_graph(graph, s, params) for s in samples])

    def backward(self, pending: Any, output_grads: Optional[Sequence[torch.Tensor]]) -> List[Optional[torch.Tensor]]:
        leaves, outs = pending
        pairs = []
        for k, out in enumerate(outs):
            if not out.requires_grad:
                continue
            g = torch.ones_like(out) if output_grads is None else output_grads[k]
            if g is not None:
                pairs.append((out, g.reshape(out.shape).to(out.dtype)))
        if pairs:
            torch.autograd.backward([p[0] for p in pairs], [p[1] for p in pairs])
        return [leaf.grad if isinstance(leaf, torch.Tensor) and leaf.requires_grad else None for leaf in leaves]

    def zero_grad(self) -> None:
        for p in self.torch_params.values():
            p.grad = None

    def step(self) -> None:
        if self.optimizer is not None:
            self.optimizer.step()

    @property
    def grads(self) -> Dict[str, torch.Tensor]:
        return {n: p.grad.detach().clone() for n, p in self.torch_params.items() if p.grad is not None}

    def parameters(self) -> Dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.torch_params.items()}

    def set_parameters(self, values: Mapping[str, torch.Tensor]) -> None:
        unknown = sorted(set(values) - set(self.torch_params))
        if unknown:
            raise InputError(f"CPUDevice '{self.device.name}' has no trainable parameter(s) {unknown}")
        with torch.no_grad():
            for k, v in values.items():
                if tuple(v.shape) != tuple(self.torch_params[k].shape):
                    raise InputError(f"CPUDevice '{self.device.name}': parameter '{k}' has shape "
                                     f"{list(self.torch_params[k].shape)}, got {list(v.shape)}")
            for k, v in values.items():
                self.torch_params[k].copy_(v)


def _module_parameters(module: Any) -> List[Tuple[str, torch.nn.Parameter]]:
    from pybuda.module import PyBudaModule, PyTorchModule

    if isinstance(module, PyTorchModule):
        return list(module.module.named_parameters())
    if isinstance(module, PyBudaModule):
        # Torch leaves holding the parameters' values: torch autograd and optimizers train them.
        return [(p.get_name(), torch.nn.Parameter(p.value().detach().clone().float(), requires_grad=p.requires_grad))
                for p in module.get_parameters()]
    fn = getattr(module, "fn", None)
    if isinstance(fn, torch.nn.Module):
        return [(f"{module.name}.{n}", p) for n, p in fn.named_parameters()]
    return []


def _eval_graph(graph: Any, inputs: Sequence[torch.Tensor], params: Mapping[str, torch.Tensor]) -> List[torch.Tensor]:
    """One sample through ``graph`` with the op registry's torch references, differentiably (the CPU
    reference executor runs without autograd)."""
    from pybuda.ir.graph import INPUT, OP, OUTPUT
    from pybuda.ops import registry

    values: Dict[str, torch.Tensor] = {node.name: v for node, v in zip(graph.inputs, inputs)}
    outputs = []
    for node in graph:
        if node.kind == INPUT:
            continue
        if node.kind == OP:
            values[node.name] = registry.evaluate(node.op_type, [values[o] for o in node.operands], node.attrs)
        elif node.kind == OUTPUT:
            outputs.append(values[node.operands[0]])
        else:  # parameter or constant
            values[node.name] = params[node.name]
    return outputs


def _run_torch(module: Any, values: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    from pybuda.module import PyTorchModule, flatten_torch_outputs
    from pybuda.tensor import as_tuple

    if isinstance(module, PyTorchModule):
        return list(flatten_torch_outputs(module.module(*values)))
    # A CPU-fallback stage runs once per sample of the microbatch (its shapes are per sample).
    samples = split_microbatch(list(values), module.per_sample_shapes, f"CPU fallback stage '{module.name}'")
    return fold_microbatch([list(as_tuple(module.fn(*s))) for s in samples])


# --- the session ----------------------------------------------------------------------------------------------------


@dataclass
class TrainingSession:
    """The devices of a training pipeline, their trainers and the forwards waiting for a backward."""

    devices: List[Device]
    trainers: List[Any]
    output_queue: Any
    checkpoint_queue: Any
    loss_queue: Any = None
    pending: Deque[List[Any]] = field(default_factory=deque)
    optimizer_steps: int = 0
    closed: bool = False

    @property
    def first(self) -> Device:
        return self.devices[0]

    def require_inputs(self, count: int, func: str) -> None:
        """InputError unless ``count`` inputs (and targets, with a loss module) are pushed and waiting."""
        src = self.first
        if src._staging.qsize() < count:
            raise InputError(f"{func} needs {count} input(s) but {src._staging.qsize()} are pushed to '{src.name}'; "
                             f"push each microbatch with push_to_inputs first")
        loss_trainer = self._loss_trainer()
        if loss_trainer is not None and loss_trainer.device._targets.qsize() < count:
            raise InputError(f"{func} needs {count} target(s) but {loss_trainer.device._targets.qsize()} are pushed "
                             f"to '{loss_trainer.device.name}'; push one per input with push_to_target_inputs")

    def forward(self, count: int) -> None:
        """Run ``count`` pushed inputs forward; each waits for its backward."""
        _check_count("run_forward", count)
        self.require_inputs(count, f"run_forward({count})")
        for trainer in self.trainers:
            if isinstance(trainer, TTTrainer):
                trainer.check_room(len(self.pending) + count)
        loss_trainer = self._loss_trainer()
        src = self.first
        for _ in range(count):
            item = src._staging.get_nowait()
            values: List[torch.Tensor] = list(item.tensors)
            contexts = []
            for trainer in self.trainers:
                targets = trainer.device._targets.get_nowait().tensors if trainer.has_loss else None
                values, ctx = trainer.forward(values, targets)
                contexts.append(ctx)
            self.pending.append(contexts)
            from pybuda.tensor import Tensor

            outs = [Tensor.create_from_torch(v) for v in values]
            if loss_trainer is not None and self.loss_queue is not None:
                self.loss_queue.put(outs)
            self.output_queue.put(outs)

    def backward(self, count: int, zero_grad: bool) -> None:
        """Run the backward of the ``count`` oldest forwards, accumulating gradients."""
        _check_count("run_backward", count)
        if self._loss_trainer() is None:
            raise PybudaError("run_backward: the pipeline has no loss module; place one on the last device with "
                              "place_loss_module")
        if len(self.pending) < count:
            raise PybudaError(f"run_backward({count}): {len(self.pending)} forward(s) wait for a backward; call "
                              f"run_forward first (each run_backward input needs its run_forward)")
        if zero_grad:
            for t in self.trainers:
                t.zero_grad()
        for _ in range(count):
            contexts = self.pending.popleft()
            grads: Optional[List[Any]] = None
            for trainer, ctx in zip(reversed(self.trainers), reversed(contexts)):
                grads = trainer.backward(ctx, grads)

    def optimizer(self, checkpoint: bool) -> None:
        for t in self.trainers:
            t.step()
        self.optimizer_steps += 1
        if checkpoint and self.checkpoint_queue is not None:
            self.checkpoint_queue.put(self.checkpoint())

    def schedulers(self) -> None:
        for t in self.trainers:
            if isinstance(t, TTTrainer):
                scheduler = getattr(t.device, "scheduler", None)
                if scheduler is not None:
                    scheduler.step()
                    t.refresh_hyperparameters()
            elif t.scheduler is not None:
                t.scheduler.step()

    def checkpoint(self) -> List[Dict[str, Any]]:
        from pybuda.tensor import Tensor

        return [{k: Tensor.create_from_torch(v) for k, v in t.parameters().items()} for t in self.user_trainers()]

    def user_trainers(self) -> List[Any]:
        return [t for t in self.trainers if getattr(t.device, "_fallback_of", None) is None]

    def trainer_of(self, device: Device) -> Any:
        for t in self.trainers:
            if t.device is device:
                return t
        raise PybudaError(f"device '{device.name}' is not in the training pipeline")

    def _loss_trainer(self) -> Any:
        last = self.trainers[-1]
        return last if last.has_loss else None


def _check_count(func: str, count: int) -> None:
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise InputError(f"{func}: the input count must be a positive int, got {count!r}")


# --- building a session -------------------------------------------------------------------------------------------------


_current: Optional[TrainingSession] = None


def current() -> Optional[TrainingSession]:
    """The running training session, if any."""
    return _current if _current is not None and not _current.closed else None


def close() -> None:
    global _current
    if _current is not None:
        _current.closed = True
    _current = None


def start(devices: Sequence[Device], config: Any, output_queue: Any, checkpoint_queue: Any,
          sample_targets: Sequence[Any] = ()) -> TrainingSession:
    """Compile every device of ``devices`` (the translated pipeline) for training and make the session current."""
    global _current
    from pybuda.runtime.ttdevice import TTDevice

    close()
    for k, d in enumerate(devices):
        if d.loss_module is not None and k != len(devices) - 1 and devices[k + 1]._fallback_of is not d:
            raise ModuleError(f"device '{d.name}' holds loss module '{d.loss_module.name}' but is not the last device "
                              f"of the pipeline ({' -> '.join(x.name for x in devices)}); the loss runs on the last device")
    last = devices[-1]
    if last.loss_module is None and not any(d.loss_module is not None for d in devices):
        log.info("training pipeline without a loss module: run_backward will need one")
    if sample_targets:
        from pybuda.runtime.device import normalize_push

        item = normalize_push(tuple(sample_targets), last.name)
        holder = _loss_holder(devices)
        if holder is not None and holder._first_targets is None:
            holder._first_targets = item
    item = devices[0].first_input_item()
    tt_optimizer = None
    trainers: List[Any] = []
    for k, d in enumerate(devices):
        owner = d._fallback_of
        optimizer_owner = getattr(owner, "optimizer", None) if owner is not None else None
        targets = d._first_targets if d.loss_module is not None else None
        if d.loss_module is not None and targets is None:
            raise InputError(f"device '{d.name}' holds loss module '{d.loss_module.name}': push targets with "
                             f"push_to_target_inputs or pass sample_targets to initialize_pipeline")
        if isinstance(d, TTDevice):
            trainer = TTTrainer(d, item, targets, config, needs_input_grads=k > 0)
            tt_optimizer = tt_optimizer or d.optimizer
            item = InputItem(tuple(fold_microbatch([trainer.sample_outputs] * trainer.microbatch))) \
                if trainer.sample_outputs else None
        else:
            trainer = HostTrainer(d, item, targets, optimizer_owner)
            item = InputItem(tuple(trainer.sample_outputs))
        trainers.append(trainer)
    # CPU-fallback stages of a TTDevice train with its optimizer: the pre device was built before it.
    for t in trainers:
        if isinstance(t, HostTrainer) and t.optimizer is None and t.device._fallback_of is not None:
            opt = getattr(t.device._fallback_of, "optimizer", None)
            params = list(dict.fromkeys(t.torch_params.values()))
            if opt is not None and params:
                t.optimizer = opt.get_pytorch_optimizer(params)
    _current = TrainingSession(list(devices), trainers, output_queue, checkpoint_queue)
    return _current


def _loss_holder(devices: Sequence[Device]) -> Optional[Device]:
    for d in devices:
        if d.loss_module is not None:
            return d
    return None


def new_queue() -> "queue.Queue[Any]":
    from pybuda.runtime.transport import OutputQueue

    return OutputQueue()
