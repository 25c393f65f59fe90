"""Training on the simulated chip: the forward, backward and optimizer programs of a pipeline of devices.

``initialize_pipeline(training=True)`` builds a :class:`TrainingSession` over the pipeline (the user's
devices plus the CPU-fallback devices a split PyTorch model needs). Each device gets a trainer:

* a **TTDevice** compiles every module placed on it (and its loss module, last) into three programs, as
  TT-Buda did: the forward graph (which also returns the activations the backward needs), the backward
  graph (:func:`pybuda.passes.graph.autograd.build_training_graphs`) and one optimizer graph over all its
  trainable parameters (:meth:`pybuda.optimizers.Optimizer.build_update_graph`). Each is compiled by
  :func:`pybuda.compile.compile_graph` into its own netlist and runs on the golden backend, so forward,
  backward and optimizer never share an epoch. A program the compiler cannot place runs on the CPU
  reference instead, with a line in :attr:`TTTrainer.report`. Gradients of a microbatch are summed on
  the way out of the backward program and accumulated across microbatches and ``accumulation_steps``
  in the accumulate format (Float32 where the compile is Float32, else Float16_b), as the chip's
  accumulation queues hold them. Parameters, optimizer state and hyper-parameters are device
  tensors: after an optimizer step the new values are written into the forward and backward programs'
  parameter queues.
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

    def run(self, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        return list(self.executor.run(list(inputs)))


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

    tg = build_training_graphs(graph, recompute=bool(getattr(config, "enable_recompute", False)),
                               input_grads=list(input_grads))
    _add_sample_dim(tg.backward, list(tg.param_grads.values()))
    common = dict(device_desc=device_desc, devtype=devtype, config=config, microbatch=microbatch, run=run)
    fwd = compile_program(f"fwd_{name}", tg.forward, epoch_type="fwd", **common)
    bwd = compile_program(f"bwd_{name}", tg.backward, epoch_type="bwd", **common)
    return tg, fwd, bwd


def compile_optimizer(name: str, optimizer: Any, shapes: Mapping[str, Sequence[int]], *, device_desc: Any,
                      devtype: Any, config: Any, run: bool = True) -> Tuple[Any, Program]:
    """The optimizer's update graph over the parameters ``shapes`` and its program: ``(UpdateGraph, opt)``."""
    update = optimizer.build_update_graph({n: (tuple(s), torch.float32) for n, s in shapes.items()})
    program = compile_program(f"opt_{name}", update.graph, epoch_type="opt", device_desc=device_desc,
                              devtype=devtype, config=config, microbatch=1, run=run)
    return update, program


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
        self.grads: Dict[str, torch.Tensor] = {}
        self.optimizer_program: Optional[Program] = None
        self.update = None
        if device.optimizer is not None and self.params:
            self._compile_optimizer(device.optimizer)

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
        self._push_optimizer_inputs(with_params=True)

    def _optimized_names(self, optimizer: Any) -> List[str]:
        wanted = getattr(optimizer, "parameters_to_optimize", None)
        if callable(wanted):
            wanted = wanted()
        if not wanted:
            return list(self.params)
        names = {p if isinstance(p, str) else p.get_name() for p in wanted}
        return [n for n in self.params if n in names]

    def _push_optimizer_inputs(self, with_params: bool) -> None:
        values = dict(self.update.hyperparameters())
        values.update(self.optimizer_state)
        if with_params:
            values.update({n: self.params[n] for n in self.update.param_outputs})
        self.optimizer_program.executor.update_parameters(values)

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
        return estimate_training([s.forward.compile_results for s in self.stages],
                                 [s.backward.compile_results for s in self.stages],
                                 self.optimizer_program.compile_results if self.optimizer_program else None,
                                 microbatch=self.microbatch, microbatch_count=microbatch_count,
                                 accumulation_steps=accumulation_steps)

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
            results = stage.backward.run(bwd_inputs)
            named = dict(zip([n.name for n in stage.graphs.backward.outputs], results))
            for param, out_name in stage.graphs.param_grads.items():
                g = _sum_over_samples(named[out_name], self.shapes[param], self.microbatch)
                previous = self.grads.get(param)
                self.grads[param] = _round(g if previous is None else previous + g, self.acc_df)
            input_grads = []
            for k, node in enumerate(stage.graphs.forward.inputs[:stage.n_inputs]):
                out_name = stage.graphs.input_grads.get(node.name)
                input_grads.append(named[out_name] if out_name is not None else None)
            grads = input_grads
        return [g if g is not None else None for g in input_grads]

    def zero_grad(self) -> None:
        self.grads = {}

    def step(self) -> None:
        """One optimizer step on the device over the accumulated gradients."""
        if self.optimizer_program is None:
            return
        names = list(self.update.param_outputs)
        grads = [self.grads.get(n, torch.zeros(self.shapes[n])) for n in names]
        outs = self.optimizer_program.run(grads)
        named = dict(zip([n.name for n in self.update.graph.outputs], outs))
        new_params = {p: named[o].reshape(self.shapes[p]) for p, o in self.update.param_outputs.items()}
        self.optimizer_state = {s: named[o].reshape(self.optimizer_state[s].shape)
                                for s, o in self.update.state_outputs.items()}
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
        for k, v in values.items():
            self.params[k] = v.detach().clone().float()
        for stage in self.stages:
            for prog in (stage.forward, stage.backward):
                mine = {k: v for k, v in self.params.items() if k in prog.executor.get_parameters()}
                if mine:
                    prog.executor.update_parameters(mine)
        if self.optimizer_program is not None:
            mine = {k: v for k, v in self.params.items() if k in self.update.param_outputs}
            if mine:
                self.optimizer_program.executor.update_parameters(mine)

    def parameters(self) -> Dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.params.items()}


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
    """A CPUDevice's modules trained with torch autograd (CPU-fallback stages included)."""

    def __init__(self, device: Any, sample: InputItem, targets: Optional[InputItem], optimizer_owner: Any):
        from pybuda.module import PyTorchModule
        from pybuda.runtime.stages import CpuFallbackModule

        self.device = device
        self.modules = list(device.modules)
        for m in self.modules:
            if not isinstance(m, (PyTorchModule, CpuFallbackModule)):
                raise ModuleError(f"CPUDevice '{device.name}': training module '{m.name}' ({type(m).__name__}) on a "
                                  f"CPUDevice is not supported; place PyBuda modules on a TTDevice")
        self.loss = device.loss_module
        if self.loss is not None and not isinstance(self.loss, PyTorchModule):
            raise ModuleError(f"CPUDevice '{device.name}': its loss module must be a PyTorchModule (a torch loss), "
                              f"got {type(self.loss).__name__}; PyBuda losses run on a TTDevice")
        if self.loss is not None and targets is None:
            raise InputError(f"CPUDevice '{device.name}' holds loss module '{self.loss.name}': push targets with "
                             f"push_to_target_inputs or pass sample_targets")
        self.torch_params: Dict[str, torch.nn.Parameter] = {}
        for m in self.modules:
            for n, p in _module_parameters(m):
                if p.requires_grad:
                    self.torch_params.setdefault(n, p)
        self.optimizer = None
        self.scheduler = None
        params = list(dict.fromkeys(self.torch_params.values()))
        if getattr(device, "optimizer_f", None) is not None:
            target = self.modules[0].module if isinstance(self.modules[0], PyTorchModule) else params
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
                values = _run_torch(m, values)
            if self.loss is not None:
                values = list(_run_torch(self.loss, values + [t.detach().float() if t.is_floating_point() else t
                                                                for t in (targets or ())]))
        return [v.detach() for v in values], ((leaves, values) if keep else None)

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
    from pybuda.module import PyTorchModule

    if isinstance(module, PyTorchModule):
        return list(module.module.named_parameters())
    fn = getattr(module, "fn", None)
    if isinstance(fn, torch.nn.Module):
        return [(f"{module.name}.{n}", p) for n, p in fn.named_parameters()]
    return []


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
