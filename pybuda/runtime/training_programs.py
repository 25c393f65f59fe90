"""A training program of a TTDevice: one graph (forward, backward or optimizer) compiled for the chip, or run on
the CPU reference where the compiler cannot place it; plus the per-stage record a trainer keeps.

:func:`compile_stage` runs autograd on one module's graph and compiles its forward and backward programs;
:func:`compile_optimizer` compiles the optimizer's update graph. ``pybuda benchmark -t`` calls both with
``run=False`` (compile only).
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import torch

from pybuda.dtypes import DataFormat
from pybuda.errors import CompileError
from pybuda.ir.graph import JUNK_PADDED_INPUT, RUNTIME_UPDATED, WRITTEN_IN_PLACE
from pybuda.update_graph import DECAY_TOLERANCE, OUTPUT_SUFFIX
from pybuda.runtime.backend_api import CPUReferenceExecutor, create_executor

log = logging.getLogger("pybuda.runtime.training")


def accumulate_format(config: Any, device_desc: Any = None) -> DataFormat:
    """The format gradients accumulate in: the config's accumulate format, else Float32 when the compile is
    Float32, else Float16_b (TT-Buda's default for gradient accumulation queues). On Grayskull (``device_desc``'s
    arch), whose Dest holds no Float32, Float32 becomes Float16_b, as the data-format pass makes every op's
    accumulation there: a training netlist accumulating in Float32 would not validate."""
    explicit = getattr(config, "default_accumulate_df", None)
    if explicit is not None:
        acc = DataFormat.from_json(explicit)
    elif getattr(config, "default_df_override", None) == DataFormat.Float32:
        acc = DataFormat.Float32
    else:
        acc = DataFormat.Float16_b
    from pybuda.arch.types import BackendDevice

    if acc in (DataFormat.Float32, DataFormat.Int32) and getattr(device_desc, "arch", None) == BackendDevice.Grayskull:
        return DataFormat.Float16_b
    return acc


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
    #: Inputs the graph reads in another layout than their framework shape (:func:`saved_layouts`): input
    #: name -> ``(shape, TMs)``; the host converts a value it pushes with :func:`to_gradient_layout`.
    input_layouts: Dict[str, Any] = field(default_factory=dict)

    def run(self, inputs: Sequence[Optional[torch.Tensor]],
            params: Optional[Mapping[str, int]] = None) -> List[Optional[torch.Tensor]]:
        """Outputs in graph-output order; on the device's training netlist, inputs and outputs that stay in
        device DRAM are None (``params``: the program's parameters, such as ``$p_zero_grad``)."""
        if getattr(self.executor, "takes_program_params", False):  # a program of a training netlist
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
    from pybuda.passes.graph.autograd import build_training_graphs, save_inputs_on_device

    from pybuda.passes.graph.microbatch import TRACED_PER_SAMPLE, traced_for_microbatch
    from pybuda.passes.graph.optimize_tms import DEVICE_RESIDENT

    tg = build_training_graphs(graph, recompute=bool(getattr(config, "enable_recompute", False)),
                               input_grads=list(input_grads))
    if microbatch > 1 and not traced_for_microbatch(graph, microbatch):
        # The forward was traced for one sample, so its backward is one sample's computation too; the backward's
        # own inputs (saved activations) cannot tell (strip_microbatch would guess from their dim 0).
        for node in tg.backward.inputs:
            node.tags[TRACED_PER_SAMPLE] = True
    _add_sample_dim(tg.backward, list(tg.param_grads.values()))
    for node in tg.backward.outputs:  # parameter gradients: accumulated in place on the device
        if node.name in tg.param_grads.values():
            node.tags[WRITTEN_IN_PLACE] = True
    save_inputs_on_device(tg)
    # Activations the forward saves stay in device DRAM for the backward (one training netlist): the
    # backward reads them in the forward's layout, so their TMs run on the device, not on a host.
    saved_from_forward = set(tg.saved_outputs_sources())
    for node in tg.backward.inputs:
        if node.name in saved_from_forward:
            node.tags[DEVICE_RESIDENT] = True
    common = dict(device_desc=device_desc, devtype=devtype, config=config, microbatch=microbatch, run=run)
    fwd = compile_program(f"fwd_{name}", tg.forward, epoch_type="fwd", **common)
    junk = junk_padded_outputs(fwd)
    for source, out_name in zip(tg.saved_outputs_sources(), tg.saved_outputs):
        if out_name in junk:
            tg.backward[source].tags[JUNK_PADDED_INPUT] = True
    layouts = saved_layouts(tg, fwd)
    if layouts:
        # The backward reads those activations as the forward left them on the device (channels-last conv
        # outputs), turning them on the device itself, so the saved queue can stay in DRAM between them.
        try:
            bwd = compile_program(f"bwd_{name}", with_input_layouts(tg.backward, layouts), epoch_type="bwd",
                                  **common)
            if bwd.on_device:
                bwd.input_layouts = dict(layouts)
                return tg, fwd, bwd
            bwd.executor.close()
        except CompileError as e:
            log.info("backward '%s' does not compile with the forward's layouts (%s); the host converts", name, e)
    bwd = compile_program(f"bwd_{name}", tg.backward, epoch_type="bwd", **common)
    return tg, fwd, bwd


def junk_padded_outputs(program: Optional[Program]) -> Set[str]:
    """The outputs of the compiled ``program`` whose device queue may hold junk in the tile padding: the host
    drops it when it pops them, but a program reading such a queue on the device (a training netlist link)
    must be compiled to zero it (``JUNK_PADDED_INPUT``)."""
    from pybuda.passes.lower.common import JUNK_PADDING

    lowered = getattr(getattr(program, "compile_results", None), "lowered_graph", None)
    if lowered is None:
        return set()
    return {name for name, q in lowered.queues.items() if q.tags.get(JUNK_PADDING)}


def junk_padded_gradients(graphs: Any, backward: Optional[Program]) -> Set[str]:
    """The parameters whose gradient the compiled ``backward`` of the TrainingGraphs ``graphs`` writes with junk
    in the tile padding (see :func:`junk_padded_outputs`): pass them to :func:`compile_optimizer`."""
    junk = junk_padded_outputs(backward)
    return {param for param, grad in graphs.param_grads.items() if grad in junk}


def saved_layouts(graphs: Any, forward: Program) -> Dict[str, Tuple[Tuple[int, ...], Tuple[Any, ...]]]:
    """Backward input -> ``(shape, TMs)`` for the activations the compiled ``forward`` saves in another device
    layout than their framework shape (the host TMs of its output are reshapes and transposes only, such as
    a conv output the device holds channels-last): a backward reading that layout and applying those TMs
    itself can share the forward's queue, where one reading the framework layout needs the host to turn
    every microbatch's activation."""
    host_io = getattr(forward.compile_results, "host_io", None)
    if host_io is None:
        return {}
    inputs = {node.name: node for node in graphs.backward.inputs}
    out: Dict[str, Tuple[Tuple[int, ...], Tuple[Any, ...]]] = {}
    for source, out_name in zip(graphs.saved_outputs_sources(), graphs.saved_outputs):
        rec = next((r for r in host_io.outputs if r.name == out_name), None)
        node = inputs.get(source)
        layout = _layout_of(rec, tuple(node.shape)) if node is not None else None
        if layout is not None:
            out[source] = layout
    return out


def _layout_of(rec: Any, shape: Tuple[int, ...]) -> Optional[Tuple[Tuple[int, ...], Tuple[Any, ...]]]:
    """``(device shape, TMs)`` of host-I/O output record ``rec`` whose values have framework ``shape``, when its
    device layout differs from ``shape``'s and its host TMs are reshapes and transposes; else None."""
    from pybuda.netlist.host_io import canonical_zrc

    if rec is None or rec.device_shape is None or any(tm.op_type not in ("reshape", "transpose") for tm in rec.host_tms):
        return None
    layout = tuple(rec.device_shape)
    turned = any(tm.op_type == "transpose" for tm in rec.host_tms)
    if math.prod(layout) != math.prod(shape) or not (turned or canonical_zrc(layout) != canonical_zrc(shape)):
        return None
    return layout, _concrete_tms(layout, rec.host_tms)


def with_input_layouts(graph: Any, layouts: Mapping[str, Tuple[Tuple[int, ...], Sequence[Any]]]) -> Any:
    """A copy of ``graph`` whose inputs ``layouts`` (name -> ``(shape, TMs)``) arrive in ``shape`` and are turned
    into their old shape by the TMs, as graph ops just after the input (the compiler may fold them into
    their readers)."""
    g = graph.copy()
    for name, (shape, tms) in layouts.items():
        node = g[name]
        old_shape = tuple(node.shape)
        node.shape = tuple(shape)
        added: List[str] = []
        cur = name
        for k, (op_type, attrs) in enumerate(tms):
            cur = g.add_op(g.unique_name(f"{name}.layout{k}"), op_type, [cur], dict(attrs)).name
            added.append(cur)
        if tuple(g[cur].shape) != old_shape and math.prod(g[cur].shape) == math.prod(old_shape):
            cur = g.add_op(g.unique_name(f"{name}.layout"), "reshape", [cur], {"shape": old_shape}).name
            added.append(cur)
        if tuple(g[cur].shape) != old_shape:
            raise CompileError(f"input '{name}': layout {list(shape)} does not turn into {list(old_shape)}",
                               stage="training layouts")
        for other in g.nodes.values():
            if other.name not in added:
                other.operands = [cur if o == name else o for o in other.operands]
        order = [n for n in g.nodes if n not in added]
        at = order.index(name) + 1
        g.nodes = {n: g.nodes[n] for n in order[:at] + added + order[at:]}
    return g


def optimizer_parameter_names(optimizer: Any) -> Optional[Set[str]]:
    """The names of the parameters ``optimizer`` was given to step (``parameters=`` of a pybuda optimizer), or None
    when it steps every trainable parameter of its device."""
    names = getattr(optimizer, "parameter_names", None)
    return set(names) if names else None


def compile_optimizer(name: str, optimizer: Any, shapes: Mapping[str, Sequence[int]], *, device_desc: Any,
                      devtype: Any, config: Any, run: bool = True,
                      grad_layouts: Optional[Mapping[str, Sequence[int]]] = None,
                      junk_gradients: Collection[str] = (),
                      parameter_formats: Optional[Mapping[str, DataFormat]] = None) -> Tuple[Any, Program]:
    """The optimizer's update graph over the parameters ``shapes`` and its program: ``(UpdateGraph, opt)``.
    ``grad_layouts``: gradients read in another shape than their parameter's (:func:`gradient_layouts`);
    ``junk_gradients``: parameters whose gradient the backward leaves with junk tile padding
    (:func:`junk_padded_gradients`), zeroed as the optimizer reads it; ``parameter_formats``: the formats the
    forward programs store the parameters in (:func:`parameter_formats`).

    The program runs on the host CPU, with a warning and its reason in ``placement``, where the compiled
    program cannot carry what the optimizer accumulates from step to step
    (:func:`imprecise_optimizer_state`)."""
    from pybuda.passes.graph.optimize_tms import DEVICE_RESIDENT

    update = optimizer.build_update_graph({n: (tuple(s), torch.float32) for n, s in shapes.items()},
                                          grad_layouts={n: tuple(s) for n, s in (grad_layouts or {}).items()
                                                        if n in shapes})
    for node in update.graph.inputs:  # gradients: read from the backward's accumulators on the device
        node.tags[DEVICE_RESIDENT] = True
    for node in update.graph.outputs:  # new parameters and state: written in place on the device
        node.tags[WRITTEN_IN_PLACE] = True
    for param in junk_gradients:
        if param in update.grad_inputs:
            update.graph[update.grad_inputs[param]].tags[JUNK_PADDED_INPUT] = True
    program = compile_program(f"opt_{name}", update.graph, epoch_type="opt", device_desc=device_desc,
                              devtype=devtype, config=optimizer_config(config), microbatch=1, run=run)
    if program.on_device:
        why = imprecise_optimizer_state(update, program.compile_results, parameter_formats)
        if why:
            # The device would train with another rule than the optimizer's (Adam's variance stops decaying
            # at Float16_b and its first step comes out twice torch's): the host runs the update in float32.
            log.warning("optimizer program '%s' runs on the host CPU: %s", program.name, why)
            if program.executor is not None:
                program.executor.close()
            program = Program(program.name, update.graph, CPUReferenceExecutor(update.graph, 1) if run else None,
                              None, f"host: {why}")
    return update, program


def parameter_formats(programs: Sequence[Optional[Program]]) -> Dict[str, DataFormat]:
    """Parameter -> the format of its queue in the compiled (forward) ``programs``: where the device keeps it,
    which the optimizer writes in place on the training netlist. Programs run on the host are skipped."""
    out: Dict[str, DataFormat] = {}
    for program in programs:
        lowered = getattr(getattr(program, "compile_results", None), "lowered_graph", None)
        if lowered is not None:
            out.update({name: q.df for name, q in lowered.queues.items() if q.kind == "parameter"})
    return out


def _dest_formats(lowered: Any, output: str) -> List[DataFormat]:
    """The Dest formats (``acc_df``) of the ops of ``lowered`` that compute output queue ``output``, back to the
    queues they read."""
    out = lowered.queues.get(output)
    todo = [out.producer] if out is not None and out.producer else []
    seen: Set[str] = set()
    dfs: List[DataFormat] = []
    while todo:
        op_name = todo.pop()
        if op_name in seen or op_name not in lowered.ops:
            continue
        seen.add(op_name)
        op = lowered.ops[op_name]
        dfs.append(op.acc_df)
        todo.extend(i for i in op.inputs if i in lowered.ops)
    return dfs


def imprecise_optimizer_state(update: Any, results: Any,
                              parameter_formats: Optional[Mapping[str, DataFormat]] = None) -> str:
    """Why the compiled optimizer program ``results`` of UpdateGraph ``update`` cannot carry what the optimizer
    accumulates from step to step, or ``""`` when it can. Two things, each in the least precise format it passes
    through (the Dest format, ``acc_df``, of every op that computes its next value, and its queues' formats):

    * a decayed state ``x ← β·x`` (:meth:`pybuda.update_graph.UpdateGraph.imprecise_state`): its per-step change
      ``1 − β`` must survive the rounding. Grayskull's Dest holds no Float32, and its Float16_b cannot carry
      Adam's and LAMB's β2 = 0.999 (nor a momentum above about 0.92);
    * a parameter stored in a format more precise than the Dest format its update is computed in (Float32
      parameters on Grayskull): the device would round it to the Dest format every step, so updates below
      that format's last-place unit are lost (LARS's small steps came out 3x torch's). A parameter stored in
      the Dest format (Float16_b on Grayskull) keeps the precision its format was chosen with.

    ``parameter_formats``: where the parameters are stored (:func:`parameter_formats`); the program's own
    parameter queues otherwise."""
    from pybuda.golden.formats import format_info

    lowered = getattr(results, "lowered_graph", None)
    if lowered is None:
        return ""
    details = []
    formats: Dict[str, List[Any]] = {}
    for state in update.state_decays:
        dfs = [lowered.queues[q].df for q in (state, state + OUTPUT_SUFFIX) if q in lowered.queues]
        formats[state] = dfs + _dest_formats(lowered, state + OUTPUT_SUFFIX)
    groups: Dict[Tuple[float, Any, float], List[str]] = {}
    for state, beta, df, error in update.imprecise_state(formats):
        groups.setdefault((beta, df, error), []).append(state)
    for (beta, df, error), states in groups.items():
        details.append(f"β = {beta:g} (a per-step change 1 − β = {1 - beta:.3g}) of {_names(states)} in {df.name}, "
                       f"whose last-place unit is up to {error:.0%} of that change, where at most "
                       f"{DECAY_TOLERANCE:.0%} is allowed")
    rounded: Dict[Tuple[DataFormat, DataFormat], List[str]] = {}
    for param, out_name in update.param_outputs.items():
        queue = lowered.queues.get(param)
        stored = (parameter_formats or {}).get(param, queue.df if queue is not None else None)
        dests = [df for df in _dest_formats(lowered, out_name) if not format_info(df).is_integer]
        if stored is None or not dests or format_info(stored).is_integer:
            continue
        dest = min(dests, key=lambda df: format_info(df).man_bits)
        if format_info(dest).man_bits < format_info(stored).man_bits:
            rounded.setdefault((stored, dest), []).append(param)
    for (stored, dest), params in rounded.items():
        details.append(f"{_names(params)} stored in {stored.name} would be updated through a {dest.name} Dest, "
                       f"which rounds them to {dest.name} every step and loses the updates below its last-place "
                       f"unit")
    if not details:
        return ""
    return (f"the device cannot carry what the {type(update.optimizer).__name__} optimizer accumulates over steps: "
            f"{'; '.join(details)}. A Float32 Dest would carry it; Grayskull's holds no Float32")


def _names(names: Sequence[str], shown: int = 3) -> str:
    """``'a', 'b', 'c' and 2 more``."""
    text = ", ".join(f"'{n}'" for n in names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def optimizer_config(config: Any) -> Any:
    """``config`` for an optimizer program: its ops compute in Float32 at HiFi4, whatever the model's formats.

    An update is small against its parameter, and the rules hold constants a 16-bit or block format cannot: at
    Float16_b, Adam's β2 = 0.999 rounds to 1 or to 0.996, so the bias correction 1 − β2ᵗ is off by 4x (the
    first steps came out twice torch's) or zero, and a Bfp8_b block flushes a small gradient's square to zero,
    which made ``m / (√v + ε)`` infinite. ``amp_properties`` rules still apply (a rule may target
    ``epoch_type="opt"``); the model's ``amp_level`` does not. Grayskull's Dest holds no Float32, so there the
    rules still round through Float16_b: :func:`compile_optimizer` runs the program on the host where that
    cannot carry the optimizer's state (:func:`imprecise_optimizer_state`)."""
    from pybuda.dtypes import MathFidelity

    cfg = copy.deepcopy(config)
    cfg.default_df_override = DataFormat.Float32
    cfg.default_accumulate_df = None  # Float32 after a Float32 default, where the chip's Dest holds it
    cfg.default_math_fidelity = MathFidelity.HiFi4
    cfg.amp_level = None
    return cfg


def gradient_layouts(graphs: Any, backward: Program) -> Dict[str, Tuple[Tuple[int, ...], Tuple[Any, ...]]]:
    """Parameter -> ``(shape, TMs)`` in which an optimizer could read the gradient the compiled ``backward``
    writes: the backward output's device shape and the host TMs (reshapes and transposes only) that turn it
    into the parameter's values, for the gradients whose device layout is not the parameter's (a conv
    weight's gradient as the matmul that computed it, a transposed weight gradient). Reading the accumulator
    that way, the optimizer applies those TMs on the device once per step instead of the host moving every
    microbatch's gradient (:func:`pybuda.optimizers.Optimizer.build_update_graph`'s ``grad_layouts``)."""
    host_io = getattr(backward.compile_results, "host_io", None)
    if host_io is None:
        return {}
    out: Dict[str, Tuple[Tuple[int, ...], Tuple[Any, ...]]] = {}
    for param, out_name in graphs.param_grads.items():
        rec = next((r for r in host_io.outputs if r.name == out_name), None)
        layout = _layout_of(rec, tuple(graphs.forward[param].shape))
        if layout is not None:
            out[param] = layout
    return out


def _concrete_tms(shape: Tuple[int, ...], host_tms: Sequence[Any]) -> Tuple[Any, ...]:
    """Host TMs as ``(op_type, attrs)`` with every reshape's ``-1`` resolved (graph ops need whole shapes)."""
    probe = torch.empty(shape, device="meta")
    out = []
    for tm in host_tms:
        if tm.op_type == "reshape":
            probe = probe.reshape(tuple(tm.attrs["shape"]))
            out.append(("reshape", {"shape": tuple(probe.shape)}))
        else:
            probe = probe.transpose(int(tm.attrs["dim0"]), int(tm.attrs["dim1"]))
            out.append(("transpose", {"dim0": int(tm.attrs["dim0"]), "dim1": int(tm.attrs["dim1"])}))
    return tuple(out)


def to_gradient_layout(value: torch.Tensor, layout: Tuple[Tuple[int, ...], Sequence[Any]]) -> torch.Tensor:
    """A gradient in its parameter's shape as an optimizer reading ``layout`` (:func:`gradient_layouts`)
    takes it: the layout's TMs undone, last first."""
    shape, tms = layout
    shapes = [tuple(shape)]
    probe = torch.empty(tuple(shape), device="meta")
    for op_type, attrs in tms:
        probe = probe.reshape(tuple(attrs["shape"])) if op_type == "reshape" else \
            probe.transpose(int(attrs["dim0"]), int(attrs["dim1"]))
        shapes.append(tuple(probe.shape))
    value = value.reshape(shapes[-1])
    for (op_type, attrs), before in zip(reversed(tms), reversed(shapes[:-1])):
        value = value.reshape(before) if op_type == "reshape" else value.transpose(int(attrs["dim0"]),
                                                                                    int(attrs["dim1"]))
    return value.contiguous()


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
