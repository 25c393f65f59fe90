"""The host side of a TTDevice's one training netlist (:mod:`pybuda.netlist.training`): which queues its
programs share on the device (:func:`training_links`), the merged netlist loaded on one simulated chip
(:class:`TrainingDevice`) with each program's host pushes and pops (:class:`NetlistProgram`), and the
modelled speed of its programs (:func:`training_netlist_performance`, :func:`model_training_step`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import torch

from pybuda.dtypes import DataFormat
from pybuda.errors import CompileError, InputError, PybudaError
from pybuda.netlist.tms import TMError, tms_shape
from pybuda.runtime.training_programs import (Program, _Stage, accumulate_format, compile_optimizer, compile_stage,
                                              gradient_layouts, junk_padded_gradients, junk_padded_outputs,
                                              parameter_formats)


class TrainingDevice:
    """The simulated chip loaded with a device's training netlist
    (:func:`pybuda.netlist.training.build_training_netlist`): every program's parameter and constant queues
    written once; the programs' host sides are :class:`NetlistProgram` objects."""

    def __init__(self, training_netlist: Any, tensors: Mapping[str, Mapping[str, torch.Tensor]], fast: bool,
                 tf32_operands: bool = False):
        from pybuda.golden.device import GoldenDevice
        from pybuda.netlist.host_io import to_device_layout

        self.training_netlist = training_netlist
        self.netlist = training_netlist.netlist
        self.device = GoldenDevice(self.netlist, fast=fast, tf32_operands=tf32_operands)
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

    #: :meth:`run` takes the program's parameters (such as ``$p_zero_grad``) besides its inputs.
    takes_program_params = True

    def __init__(self, owner: TrainingDevice, part: Any):
        self.owner = owner
        self.part = part
        graph = owner.netlist.graphs[part.graphs[0]]
        self.microbatch = max(1, int(graph.input_count))
        transformed = part.host_io.transformed_parameters()
        self._params = {p.name: tuple(p.shape) for p in part.host_io.parameters
                        if p.name not in transformed and p.name not in part.linked_rams
                        and (part.host_io.queue(p.name) is not None)}
        # Inputs no op of the netlist reads (the gradient of an output no gradient flows from, such as an
        # argmax's): pushing them would fill a queue nothing drains, so they are dropped.
        read = {name for g in owner.netlist.graphs.values() for op in g.ops.values() for name in op.inputs}
        self._unread = {rec.name for rec in part.host_io.inputs if self._queue(rec) not in read}

    def _queue(self, rec: Any) -> str:
        return self.part.queue_names[rec.queue]

    def run(self, inputs: Sequence[Optional[torch.Tensor]],
            params: Optional[Mapping[str, int]] = None) -> List[Optional[torch.Tensor]]:
        from pybuda.golden.executor import check_push
        from pybuda.netlist.host_io import from_device_layout, to_device_layout, torch_dtype

        part, dev = self.part, self.owner.device
        recs = part.host_io.inputs
        if len(inputs) != len(recs):
            raise InputError(f"program {part.program} takes {len(recs)} input(s), got {len(inputs)}")
        pushed = [(rec, x) for rec, x in zip(recs, inputs)
                  if rec.name not in part.linked_inputs and rec.name not in self._unread]
        # Every push is checked before any is made: a refused one leaves no queue half fed.
        for rec, x in pushed:
            if x is None:
                raise InputError(f"program {part.program}: input '{rec.name}' is not on the device; pass its value")
            check_push(rec, x, dev.netlist.queues[self._queue(rec)].df)
        for rec, x in pushed:
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

    def parameter_names(self) -> List[str]:
        """The names :meth:`get_parameters` gives, without building its tensors."""
        return list(self._params)

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
    junk = {key: junk_padded_outputs(prog) for key, prog in programs.items()}
    links = training_links({p.key: p for p in parts}, stages, update, shapes, state_shapes, microbatch,
                           tuple(device_desc.grid_size), junk)
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
    state = update.state_shapes() if update is not None else {}
    built = assemble_training_netlist([stage], optimizer, update, shapes, state, microbatch=microbatch, acc_df=acc_df,
                                      device_desc=device_desc)
    if built is None:
        raise PybudaError(f"'{name}': no training program compiled for the device")
    tnl, programs, _ = built
    return tnl, training_netlist_performance(tnl, programs, device_desc, microbatch=microbatch,
                                             microbatch_count=microbatch_count, accumulation_steps=accumulation_steps)


def gradients_via_host(tnl: Any, stages: Sequence[Any], update: Any) -> Dict[str, Any]:
    """``grad_layouts`` for an optimizer to read, in the backward's layout, the gradients that training
    netlist ``tnl`` passes through the host (:func:`pybuda.runtime.training_programs.gradient_layouts`);
    empty when there are none or ``update`` already reads them so."""
    out: Dict[str, Any] = {}
    for stage in stages:
        if stage.backward.compile_results is None:
            continue
        for param, layout in gradient_layouts(stage.graphs, stage.backward).items():
            if param in update.param_outputs and stage.graphs.param_grads[param] not in tnl.accumulators \
                    and param not in update.grad_layouts:
                out[param] = layout
    return {**update.grad_layouts, **out} if out else {}


def model_training(name: str, graph: Any, optimizer: Any, *, device_desc: Any, config: Any, microbatch: int,
                   microbatch_count: int = 1, accumulation_steps: int = 1) -> Tuple[Any, Any]:
    """Compile one module's ``graph`` for training (autograd, forward and backward programs, ``optimizer``'s
    program reading gradients in the backward's layouts) without running it, merge the programs into the
    training netlist a TTDevice would run and model its step: ``(TrainingNetlist, TrainingPerf)``. What
    ``pybuda benchmark -t`` models; ``config.enable_recompute`` is honoured."""
    common = dict(device_desc=device_desc, devtype=None, config=config, run=False)
    tg, fwd, bwd = compile_stage(name, graph, input_grads=(), microbatch=microbatch, **common)
    shapes = {n: tuple(tg.forward[n].shape) for n in tg.param_grads}
    stages = [_Stage(name, tg, fwd, bwd, 0, 0, [])]
    common["junk_gradients"] = junk_padded_gradients(tg, bwd)
    common["parameter_formats"] = parameter_formats([fwd])
    update, opt = compile_optimizer(name, optimizer, shapes, **common) if shapes and optimizer is not None \
        else (None, None)
    step = dict(microbatch=microbatch, acc_df=accumulate_format(config, device_desc), microbatch_count=microbatch_count,
                accumulation_steps=accumulation_steps)
    tnl, perf = model_training_step(name, tg, fwd, bwd, update, opt, **step)
    layouts = gradients_via_host(tnl, stages, update) if opt is not None and opt.on_device else {}
    if layouts:  # as a TTDevice does: the optimizer reads those gradients in the backward's layout
        try:
            update2, opt2 = compile_optimizer(name, optimizer, shapes, grad_layouts=layouts, **common)
        except CompileError:
            return tnl, perf
        tnl, perf = model_training_step(name, tg, fwd, bwd, update2, opt2, **step)
    return tnl, perf


def describe_training_netlist(tnl: Any, trainable: int, stages: Sequence[Any] = ()) -> str:
    """One report line: epochs, programs, what stays on the device and (given the trainer's ``stages``) what
    still crosses the host between programs (:func:`host_handoffs`)."""
    kinds = sorted({lk.kind for lk in tnl.links})
    in_place = sum(lk.kind == "update" for lk in tnl.links)
    line = (f"training netlist: {len(tnl.netlist.graphs)} epochs, programs {[p.name for p in tnl.netlist.programs]}, "
            f"device links {kinds}; {len(tnl.accumulators)}/{trainable} gradients accumulate on the device, "
            f"{in_place}/{trainable} parameters are updated in place")
    if stages:
        counts = host_handoffs(tnl, stages)
        line += "; via the host: " + ", ".join(f"{n}/{total} {kind}" for kind, (n, total) in counts.items())
    return line


def host_handoffs(tnl: Any, stages: Sequence[Any]) -> Dict[str, Tuple[int, int]]:
    """What the host still passes between the programs of training netlist ``tnl``, as ``(via the host,
    total)`` per kind: forward inputs and activations the backward reads, parameter gradients the optimizer
    reads, and parameter copies (a program's ram of a trainable parameter that the host must write after
    each optimizer step, rather than one shared or updated in place on the device)."""
    saved_inputs, saved_acts, grads, copies = [0, 0], [0, 0], [0, 0], [0, 0]
    updated = {(lk.target_part, lk.target) for lk in tnl.links if lk.kind == "update"}
    for k, stage in enumerate(stages):
        tg = stage.graphs
        fwd, bwd = tnl.parts.get(f"fwd{k}"), tnl.parts.get(f"bwd{k}")
        if fwd is None or bwd is None:
            continue
        inputs = {node.name for node in tg.forward.inputs}
        for name in tg.saved:
            count = saved_inputs if name in inputs else saved_acts
            count[1] += 1
            count[0] += name not in bwd.linked_inputs
        for out_name in tg.param_grads.values():
            grads[1] += 1
            grads[0] += out_name not in tnl.accumulators
        for part in (fwd, bwd):
            for param in tg.param_grads:
                rec = _param_rec(part.host_io, param)
                if rec is None and param not in part.host_io.transformed_parameters():
                    continue
                copies[1] += 1
                copies[0] += rec is None or not (rec.queue in part.linked_rams or (part.key, rec.queue) in updated)
    opt = tnl.parts.get("opt")
    if opt is not None:
        trainable = {p for stage in stages for p in stage.graphs.param_grads}
        for param in trainable:
            rec = _param_rec(opt.host_io, param)
            if rec is not None:
                copies[1] += 1
                copies[0] += rec.queue not in opt.linked_rams
    return {"forward inputs": tuple(saved_inputs), "activations": tuple(saved_acts), "gradients": tuple(grads),
            "parameter copies": tuple(copies)}


def training_links(parts: Mapping[str, Any], stages: Sequence[Any], update: Any, shapes: Mapping[str, Tuple[int, ...]],
                   state_shapes: Mapping[str, Tuple[int, ...]], microbatch: int, grid: Tuple[int, int],
                   junk: Optional[Mapping[str, Set[str]]] = None) -> List[Any]:
    """The queues the programs ``parts`` (keyed fwdK / bwdK / opt) can share on the device (see
    :mod:`pybuda.netlist.training`): ``stages`` hold each module's TrainingGraphs, ``update`` the optimizer's
    UpdateGraph (or None), ``shapes`` / ``state_shapes`` the parameters' and optimizer state's shapes.
    ``junk``: each part's outputs with junk in the tile padding (:func:`junk_padded_outputs`), linked only to
    inputs compiled to zero it (``JUNK_PADDED_INPUT``): every reader computes what a host push would give."""
    from pybuda.ir.graph import JUNK_PADDED_INPUT
    from pybuda.netlist import training as tn

    def clean_for(key: str, rec: Any, reader: Any = None) -> bool:
        return rec.name not in (junk or {}).get(key, ()) or (reader is not None and reader.tags.get(JUNK_PADDED_INPUT))

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
                if orec is None or irec is None or not clean_for(fk, orec, tg.backward[source]):
                    continue
                if source in getattr(stage.backward, "input_layouts", {}):
                    # the backward reads the forward's device data, before the host TMs
                    orec = dataclasses.replace(orec, host_tms=[], framework_shape=orec.device_shape)
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
            if bwd is not None:
                grec = _output_rec(bwd.host_io, grad_out)
                orec = _input_rec(opt.host_io, update.grad_inputs[param])
                if grec is not None and orec is not None and tn.can_accumulate(bwd.netlist, grec.queue) \
                        and clean_for(bk, grec, update.graph[update.grad_inputs[param]]):
                    if param in update.grad_layouts:  # the optimizer reads the device data, before host TMs
                        grec = dataclasses.replace(grec, host_tms=[], framework_shape=grec.device_shape)
                    link = _link(grid, "grad", bwd, grec.queue, opt, orec.queue,
                                 tn.output_to_input(grec, orec, 1, update.graph[update.grad_inputs[param]].shape))
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
            if tms == () and urec is not None and tn.plain_ram(frec, shape) and clean_for("opt", urec) \
                    and tn.output_to_input(urec, frec, 1, shape) == ():
                links.append(tn.Link("update", fk, frec.queue, "opt", urec.queue))
    if opt is not None and update is not None:
        for state, out_name in update.state_outputs.items():
            srec, urec = _param_rec(opt.host_io, state), _output_rec(opt.host_io, out_name)
            shape = tuple(state_shapes[state])
            if srec is None or urec is None or not tn.plain_ram(srec, shape) or not clean_for("opt", urec):
                continue
            if tn.output_to_input(urec, srec, 1, shape) == ():
                links.append(tn.Link("state", "opt", srec.queue, "opt", urec.queue))
    return links

def _link(grid: Tuple[int, int], kind: str, target: Any, target_queue: str, alias: Any, alias_queue: str,
          tms: Optional[Tuple[Any, ...]]) -> Any:
    """A link from an op-fed ``target_queue`` to ``alias_queue`` whose layouts are ``tms`` apart: the
    alias's readers apply them, or else the target's producer transposes; None when neither may."""
    from pybuda.netlist import training as tn

    if tms is None:
        return None
    # The alias's readers were compiled for its own tile shape: a producer that pads (the host crops such an
    # output when it pops it) writes more tiles than they read.
    try:
        held = tms_shape(tuple(target.netlist.queues[target_queue].shape), tms)
    except TMError:
        return None
    if tuple(held) != tuple(alias.netlist.queues[alias_queue].shape):
        return None
    if tn.readers_accept(alias.netlist, alias_queue, tms):
        return tn.Link(kind, target.key, target_queue, alias.key, alias_queue, tms)
    if [tm.name for tm in tms] == ["transpose"] and tn.can_transpose_producer(target.netlist, target_queue,
                                                                             grid):
        return tn.Link(kind, target.key, target_queue, alias.key, alias_queue, (), at_producer=True)
    return None
