"""A TTDevice's trainer: its modules' forward and backward programs and its optimizer program, run on the
device's training netlist (see :mod:`pybuda.runtime.training`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import torch

from pybuda.errors import InputError, PybudaError
from pybuda.golden.executor import golden_numerics
from pybuda.runtime.backend_api import one_sample
from pybuda.runtime.device import InputItem
from pybuda.runtime.training_netlist import (NetlistProgram, TrainingDevice, _output_rec, assemble_training_netlist,
                                             describe_training_netlist, gradients_via_host,
                                             training_netlist_performance)
from pybuda.runtime.training_programs import (Program, _batched, _round, _Stage, _sum_over_samples, accumulate_format,
                                              compile_optimizer, compile_stage, junk_padded_gradients,
                                              optimizer_parameter_names, parameter_formats, to_gradient_layout)

log = logging.getLogger("pybuda.runtime.training")


@dataclass
class _Pending:
    """A forward that waits for its backward: per stage, its inputs and saved activations."""

    stage_values: List[Tuple[List[torch.Tensor], Dict[str, torch.Tensor]]]
    outputs: List[torch.Tensor]


class TTTrainer:
    """A TTDevice's training programs (see the module docstring)."""

    def __init__(self, device: Any, sample: InputItem, targets: Optional[InputItem], config: Any,
                 needs_input_grads: bool, microbatch: int):
        from pybuda.compile import module_to_graph

        self.device = device
        self.config = config
        self.desc = device.get_device_config(config)
        self.microbatch = microbatch
        self.acc_df = accumulate_format(config, self.desc)
        self.report: List[str] = []
        modules = list(device._translated_modules or device.modules)
        if device.loss_module is not None:
            modules.append(device.loss_module)
        for module in [*device.modules, device.loss_module]:
            _refuse_batch_statistics(module, self.microbatch)
        values = one_sample(sample.tensors, self.microbatch)
        names = sample.names
        #: How a framework loss reduces over the microbatch (:func:`loss_batch_reduction`): None for a pybuda loss,
        #: whose per-sample losses add up (TT-Buda's rule), else ``(kind, shape)`` with ``kind`` 'sum' or 'mean'.
        self.loss_reduction: Optional[Tuple[str, Tuple[int, ...]]] = None
        self.stages: List[_Stage] = []
        for i, module in enumerate(modules):
            is_loss = module is device.loss_module
            n_inputs = len(values)
            if is_loss:
                if targets is None:
                    raise InputError(f"TTDevice '{device.name}' holds loss module '{module.name}': push targets with "
                                     f"push_to_target_inputs or pass sample_targets")
                self.loss_reduction = loss_batch_reduction(module, values, targets.tensors, self.microbatch)
                values = values + one_sample(targets.tensors, self.microbatch)
            captured = module_to_graph(module, values, names, graph_name=module.name, config=config)
            graph = captured.graph
            sample_outputs = list(captured.outputs)  # before compiling: the compile passes rewrite the graph
            floats = [k for k, node in enumerate(graph.inputs[:n_inputs]) if node.dtype.is_floating_point]
            grad_inputs = floats if (i > 0 or needs_input_grads) else []
            tg, fwd, bwd = compile_stage(module.name, graph, input_grads=[graph.inputs[k].name for k in grad_inputs],
                                         device_desc=self.desc, devtype=device.devtype, config=config,
                                         microbatch=self.microbatch)
            self.stages.append(_Stage(module.name, tg, fwd, bwd, n_inputs, len(graph.outputs), grad_inputs, is_loss))
            for prog in (fwd, bwd):
                self.report.append(f"{prog.name}: {prog.placement}")
            if i + 1 < len(modules):
                values, names = sample_outputs, None
        self.sample_outputs = [t.detach() for t in sample_outputs] if not self.stages[-1].is_loss else []
        self._params: Dict[str, torch.Tensor] = {}
        self.shapes: Dict[str, Tuple[int, ...]] = {}
        for stage in self.stages:
            for name in stage.graphs.param_grads:
                self._params[name] = stage.graphs.forward.tensors[name].detach().clone().float()
                self.shapes[name] = tuple(self._params[name].shape)
        # Parameters the optimizer updated in place on the device whose host copy is not read back yet: reading
        # every parameter back after each step costs more than the step's own host work, and only checkpoints
        # and host-side programs need the values (see :attr:`params`).
        self._stale: set = set()
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
        if device.optimizer is not None and self.shapes:
            self._compile_optimizer(device.optimizer)
        self._build_training_netlist()
        if self.optimizer_program is not None:
            self._push_optimizer_inputs(with_params=True, with_state=True)

    @property
    def params(self) -> Dict[str, torch.Tensor]:
        """The host copy of every trainable parameter (parameter name -> value), read back from the device
        where the optimizer updated it in place since the last read."""
        if self._stale:
            from pybuda.netlist.training import read_ram_value

            for name in sorted(self._stale):
                prog, rec = self._device_param_queue(name)
                self._params[name] = read_ram_value(rec, prog.executor.read_ram(rec.queue), self.shapes[name])
            self._stale.clear()
        return self._params

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
            devtype=self.device.devtype, config=self.config, junk_gradients=self._junk_gradients(),
            parameter_formats=self._parameter_formats())
        self.report.append(f"{self.optimizer_program.name}: {self.optimizer_program.placement}")
        self.optimizer_state = {k: v.detach().clone() for k, v in self.update.initial_state().items()}

    def _parameter_formats(self) -> Dict[str, Any]:
        """The formats the forward programs store the parameters in (the optimizer updates them there)."""
        return parameter_formats([s.forward for s in self.stages])

    def _junk_gradients(self) -> Set[str]:
        """Parameters whose gradient a backward leaves with junk tile padding (the optimizer zeroes it)."""
        return set().union(*(junk_padded_gradients(s.graphs, s.backward) for s in self.stages))

    def _gradient_input(self, param: str) -> torch.Tensor:
        """The host's accumulated gradient of ``param`` as the optimizer program reads it (see
        :func:`gradient_layouts`)."""
        value = self._host_grads.get(param, torch.zeros(self.shapes[param]))
        layout = self.update.grad_layouts.get(param)
        return value if layout is None else to_gradient_layout(value, layout)

    def _optimized_names(self, optimizer: Any) -> List[str]:
        """The parameters ``optimizer`` steps: those it was given (``parameters=``, by name), else all of them.
        The others keep their values, as in torch (the session checks that every given name exists)."""
        wanted = optimizer_parameter_names(optimizer)
        if wanted is None:
            return list(self.shapes)
        return [n for n in self.shapes if n in wanted]

    def _push_optimizer_inputs(self, with_params: bool, with_state: bool = False) -> None:
        """Hyper-parameters, and the optimizer state the host keeps (all of it with ``with_state``: state the
        optimizer program updates in place is written only once, before the first step)."""
        values = dict(self.update.hyperparameters())
        values.update({k: v for k, v in self.optimizer_state.items() if with_state or k not in self._device_state})
        if with_params:
            values.update({n: self.params[n] for n in self.update.param_outputs})
        owned = _host_written(self.optimizer_program.executor)
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

        def assemble() -> Any:
            return assemble_training_netlist(self.stages, self.optimizer_program, self.update, self.shapes,
                                             state_shapes, microbatch=self.microbatch, acc_df=self.acc_df,
                                             device_desc=self.desc, saved_microbatches=capacity)
        try:
            built = assemble()
            # An optimizer on the host reads every gradient from the host: no layout to change.
            if built is not None and self.optimizer_program is not None and self.optimizer_program.on_device:
                layouts = gradients_via_host(built[0], self.stages, self.update)
                if layouts:
                    # The optimizer reads those gradients in the backward's layout instead (one recompile).
                    first = (self.update, self.optimizer_program)
                    self.update, self.optimizer_program = compile_optimizer(
                        self.device.name, self.device.optimizer, {n: self.shapes[n] for n in self.update.param_names},
                        device_desc=self.desc, devtype=self.device.devtype, config=self.config, grad_layouts=layouts,
                        junk_gradients=self._junk_gradients(), parameter_formats=self._parameter_formats())
                    if self.optimizer_program.on_device:
                        first[1].executor.close()
                        built = assemble()
                    else:  # keep the program that compiled for the device
                        self.optimizer_program.executor.close()
                        self.update, self.optimizer_program = first
        except PybudaError as e:
            # A compiler bug must not stop training: the programs keep their own netlists (host hand-offs).
            log.warning("TTDevice '%s': no training netlist (%s); programs run from separate netlists",
                        self.device.name, e)
            self.report.append(f"training netlist: not built ({e})")
            return
        if built is None:
            return
        tnl, programs, tensors = built
        self.training_device = TrainingDevice(tnl, tensors, **golden_numerics(self.config))
        self.training_netlist = tnl
        self.saved_capacity = capacity if any(lk.kind == "saved" for lk in tnl.links) else 0
        for key, prog in programs.items():
            old = prog.executor
            prog.executor = self.training_device.program(key)
            if hasattr(old, "close"):
                old.close()
        self._device_state = {lk.target for lk in tnl.links if lk.kind == "state"}
        self.report.append(describe_training_netlist(tnl, len(self.shapes), self.stages))

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
        if self.has_loss and self.loss_reduction is not None:
            # The framework loss of the whole microbatch, as torch computes it, from its samples' losses.
            kind, shape = self.loss_reduction
            values = [v.reshape(self.microbatch, -1).sum(0).div(self.microbatch if kind == "mean" else 1)
                      .reshape(shape) for v in values]
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
            if grads is None:  # the loss stage: d(loss)/d(loss) = 1 for every sample (1/microbatch for a mean)
                seed = 1.0 / self.microbatch if self.loss_reduction and self.loss_reduction[0] == "mean" else 1.0
                grads = [torch.full(_batched(n.shape, self.microbatch), seed) for n in outs]
            bwd_inputs = [g if g is not None else torch.zeros(_batched(n.shape, self.microbatch))
                          for g, n in zip(grads, outs)]
            layouts = stage.backward.input_layouts
            bwd_inputs += [to_gradient_layout(saved[name], layouts[name])
                           if name in layouts and saved[name] is not None else saved[name]
                           for name in stage.graphs.saved]
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
                g = named[out_name] if out_name is not None else None
                if g is not None and tuple(g.shape) == tuple(node.shape) and self.microbatch > 1:
                    # A gradient no sample's values reach (an input only a comparison reads: zeros) is one
                    # constant entry: it is every sample's.
                    g = g.expand(_batched(node.shape, self.microbatch)).contiguous()
                input_grads.append(g)
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
        grads = [None if n in accumulators else self._gradient_input(n) for n in names]
        outs = self.optimizer_program.run(grads)
        named = dict(zip([n.name for n in self.update.graph.outputs], outs))
        new_params: Dict[str, torch.Tensor] = {}
        in_place: List[str] = []
        for p, o in self.update.param_outputs.items():
            if named[o] is not None:
                new_params[p] = named[o].reshape(self.shapes[p])
            else:
                in_place.append(p)
        for s, o in self.update.state_outputs.items():
            if named[o] is not None:
                self.optimizer_state[s] = named[o].reshape(self.optimizer_state[s].shape)
        self._updated_in_place(in_place)
        self.set_parameters(new_params)
        self._push_optimizer_inputs(with_params=False)

    def set_parameters(self, values: Mapping[str, torch.Tensor]) -> None:
        """New values of trainable parameters: into every program that reads them."""
        unknown = sorted(set(values) - set(self.shapes))
        if unknown:
            raise InputError(f"TTDevice '{self.device.name}' has no trainable parameter(s) {unknown}; it has "
                             f"{sorted(self.shapes)}")
        for k, v in values.items():
            if tuple(v.shape) != self.shapes[k]:
                raise InputError(f"TTDevice '{self.device.name}': parameter '{k}' has shape {list(self.shapes[k])}, "
                                 f"got {list(v.shape)}")
        self._store_parameters(values)

    def _programs(self) -> List[Program]:
        programs = [p for stage in self.stages for p in (stage.forward, stage.backward)]
        return programs + ([self.optimizer_program] if self.optimizer_program is not None else [])

    def _updated_in_place(self, names: Sequence[str]) -> None:
        """Parameters ``names`` were written in place on the device by the optimizer step. Their host copies
        are read back lazily (:attr:`params`), unless a program whose host side writes its own copy of one
        needs the new value now."""
        if not names:
            return
        holders = {k: found[0] for k in names if (found := self._device_param_queue(k)) is not None}
        copies = [prog for prog in self._programs() for k in names
                  if k in _host_written(prog.executor) and holders.get(k) is not prog]
        self._stale.update(names)
        if copies:
            self._store_parameters({k: self.params[k] for k in names}, skip_device=True)

    def _store_parameters(self, values: Mapping[str, torch.Tensor], skip_device: bool = False) -> None:
        """Keep ``values`` as the host copy and write them into every program whose host side owns a copy;
        ``skip_device``: the values came from the device's own queue, which is left as it is."""
        if not values:
            return
        for k, v in values.items():
            self._params[k] = v.detach().clone().float()
            self._stale.discard(k)
        holders = {}
        if skip_device:
            holders = {k: found[0] for k in values if (found := self._device_param_queue(k)) is not None}
        for prog in self._programs():
            owned = _host_written(prog.executor)
            mine = {k: self._params[k] for k in values if k in owned and holders.get(k) is not prog}
            if mine:
                prog.executor.update_parameters(mine)

    def parameters(self) -> Dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.params.items()}

    def parameter_names(self) -> List[str]:
        """The names :meth:`parameters` gives, without reading values back from the device."""
        return list(self.shapes)


def _refuse_batch_statistics(module: Any, microbatch: int) -> None:
    """CompileError when a PyTorch module trains batch norms on batch statistics with a microbatch above 1.

    Training compiles a model for one sample and runs a microbatch sample by sample (gradients add up over
    the samples); a batch norm in training mode normalises by the mean and variance of the whole batch, so
    each sample would be normalised by its own: other numbers than torch's, with no error. (Inference
    traces the whole push instead and keeps such ops' batch inside the graph.)"""
    torch_module = getattr(module, "module", None)
    if microbatch < 2 or not isinstance(torch_module, torch.nn.Module):
        return
    layers = [name or "<module>" for name, m in torch_module.named_modules()
              if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training]
    if layers:
        from pybuda.errors import CompileError

        shown = ", ".join(layers[:5]) + (f" and {len(layers) - 5} more" if len(layers) > 5 else "")
        raise CompileError(f"module '{module.name}' trains batch norm layers on batch statistics ({shown}): they "
                           f"normalise by the mean and variance of the whole batch, but training runs a microbatch "
                           f"sample by sample, so each of the {microbatch} samples would be normalised alone. "
                           f"Freeze them (call .eval() on the batch norm layers), push microbatches of 1, or train "
                           f"the model on a CPUDevice", stage="INIT_COMPILE")


#: The probe of :func:`loss_batch_reduction` tells a sum from a mean within this relative tolerance.
REDUCTION_RTOL = 1e-4


def loss_batch_reduction(module: Any, outputs: Sequence[torch.Tensor], targets: Sequence[torch.Tensor],
                         microbatch: int) -> Optional[Tuple[str, Tuple[int, ...]]]:
    """How the framework loss ``module`` (a PyTorchModule on the TTDevice) reduces over a microbatch: ``('sum' |
    'mean', shape of its loss)``, or None for a pybuda loss or a loss per element (no reduction).

    The device compiles the loss for one sample and runs it sample by sample; a torch loss with the default
    ``reduction='mean'`` averages over the batch, so adding the samples' gradients gave ``microbatch`` times
    torch's gradient, with no error. The loss is run in torch on two samples together and alone (``outputs``:
    one sample's model outputs, the second perturbed; ``targets``: the first push's, whole) and must be the sum
    or the mean of the two; a loss that is neither (a mean over the non-ignored tokens of the whole batch) is a
    CompileError."""
    from pybuda.errors import CompileError
    from pybuda.module import PyTorchModule

    if microbatch < 2 or not isinstance(module, PyTorchModule):
        return None
    fn = module.module
    g = torch.Generator().manual_seed(0)
    first = [o.detach() for o in outputs]
    second = [o + 0.25 * torch.randn(o.shape, generator=g) if o.is_floating_point() else o for o in first]
    batched = [t.dim() and t.shape[0] == microbatch for t in targets]
    if not all(batched) or any(o.dim() == 0 for o in first):
        return None  # targets or outputs not one row per sample: the per-sample loss is all there is
    try:
        with torch.no_grad():
            together = fn(*[torch.cat([a, b]) for a, b in zip(first, second)], *[t[0:2] for t in targets])
            alone = [fn(*first, *[t[0:1] for t in targets]), fn(*second, *[t[1:2] for t in targets])]
    except Exception:  # noqa: BLE001 -- a loss that cannot run on these slices is left to the compile
        return None
    if not all(isinstance(v, torch.Tensor) and v.numel() == 1 for v in (together, *alone)):
        return None  # a loss per element or per sample: its samples' gradients are torch's
    total = float(alone[0]) + float(alone[1])
    for kind, want in (("sum", total), ("mean", total / 2)):
        if abs(float(together) - want) <= REDUCTION_RTOL * max(abs(want), 1e-6):
            return kind, tuple(together.shape)
    raise CompileError(f"loss module '{module.name}' is neither the sum nor the mean of its samples' losses (two "
                       f"samples: {float(together):.6g} together, {float(alone[0]):.6g} and {float(alone[1]):.6g} "
                       f"alone). The device runs a microbatch sample by sample; place the loss on a CPUDevice after "
                       f"the TTDevice, or push microbatches of 1", stage="INIT_COMPILE")


def _host_written(executor: Any) -> Set[str]:
    """Names of the parameters whose values ``executor``'s host side writes (without building the zero
    tensors that ``get_parameters`` returns for a device program)."""
    names = getattr(executor, "parameter_names", None)
    return set(names()) if callable(names) else set(executor.get_parameters())
