"""PyTorch frontend: capture a ``torch.nn.Module`` into a pybuda ``ir.Graph`` with ``torch.export``.

Pipeline (each step in its own module)::

    torch.export.export ─▶ run_decompositions (only when it helps)                    (fx_export)
        ─▶ fold constants                                                            (fx_program)
        ─▶ map ATen ops onto registry ops                                            (aten_map)
        ─▶ CPU fallback split into [CPU pre, device graph, CPU post]                   (fallback)

Usage::

    result = capture(model, (input_ids,), graph_name="bert")
    result.graph              # the device ir.Graph (parameters keep their state-dict names)
    print(result.report)      # which ops run on the CPU, and why
    pre, graph, post = result.split_for_devices()
    outputs = result.run(input_ids)   # pre -> device graph (CPU reference) -> post

See :mod:`pybuda.frontend.fallback` for the exact stage contract.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.fx
import torch.utils._pytree as pytree

from pybuda.errors import CompileError, InputError, UnsupportedOp, UnsupportedOpError
from pybuda.ir.graph import OP, Graph

from pybuda.frontend import aten_map, fallback, fx_export, fx_program
from pybuda.frontend.aten_map import Builder, Const, Missing, Unsupported
from pybuda.frontend.fallback import FallbackReport
from pybuda.frontend.fx_program import FxProgram, meta_val, op_name, qualified_op_name, source_location

log = logging.getLogger(__name__)

STAGE = fx_program.STAGE

#: ``executor(graph, inputs, parameters) -> list of outputs``: runs a device graph. The default is the
#: CPU reference (:func:`pybuda.verify.run_graph_on_cpu`); the runtime swaps in the simulated chip.
Executor = Callable[[Graph, Sequence[torch.Tensor], Optional[Mapping[str, torch.Tensor]]], List[torch.Tensor]]


def cpu_reference_executor(graph: Graph, inputs: Sequence[torch.Tensor],
                           parameters: Optional[Mapping[str, torch.Tensor]] = None) -> List[torch.Tensor]:
    """Run ``graph`` with the registry's torch references (:func:`pybuda.verify.run_graph_on_cpu`)."""
    from pybuda.verify import run_graph_on_cpu

    return run_graph_on_cpu(graph, list(inputs), parameters=parameters)


@dataclass
class CaptureResult:
    """A captured PyTorch model: the device graph, the CPU fallback stages and the report.

    ``pre``/``post`` are ``torch.fx.GraphModule``\\ s (or None) and ``graph`` the device ``ir.Graph``;
    :meth:`split_for_devices` returns the three, and :meth:`run` executes them in order.
    """

    graph: Graph
    report: FallbackReport
    pre: Optional[torch.fx.GraphModule]
    post: Optional[torch.fx.GraphModule]
    input_names: List[str]
    output_names: List[str]
    program: FxProgram = field(repr=False)
    timings: Dict[str, float] = field(default_factory=dict)
    _kwarg_order: List[str] = field(default_factory=list, repr=False)

    @property
    def exported_program(self):
        """The ``torch.export.ExportedProgram`` the graph was mapped from."""
        return self.program.exported

    def split_for_devices(self) -> Tuple[Optional[Callable[..., Tuple[torch.Tensor, ...]]], Graph,
                                         Optional[Callable[..., Tuple[torch.Tensor, ...]]]]:
        """``(pre, device_graph, post)``; see :mod:`pybuda.frontend.fallback` for the contract.

        ``pre(*flat_user_inputs) -> tuple`` matching ``device_graph.inputs``; ``post(*device_outputs)
        -> tuple`` of the model's flat tensor outputs. Missing stages are None.
        """
        return self.pre, self.graph, self.post

    def flatten_inputs(self, *args: Any, **kwargs: Any) -> List[torch.Tensor]:
        """The model's tensor inputs as the flat list the stages take (``input_names`` order)."""
        ordered = {k: kwargs[k] for k in self._kwarg_order if k in kwargs}
        ordered.update({k: v for k, v in kwargs.items() if k not in ordered})
        flat = [v for v in pytree.tree_leaves((tuple(args), ordered)) if isinstance(v, torch.Tensor)]
        if len(flat) != len(self.input_names):
            raise InputError(f"graph '{self.graph.name}' takes {len(self.input_names)} tensor input(s) "
                             f"{self.input_names}, got {len(flat)}")
        return flat

    def run(self, *args: Any, executor: Optional[Executor] = None,
            parameters: Optional[Mapping[str, torch.Tensor]] = None, **kwargs: Any) -> List[torch.Tensor]:
        """Run pre -> device graph -> post on the given model inputs; returns the flat tensor outputs.

        ``executor`` runs the device graph (default: the CPU reference); ``parameters`` override stored
        parameter values of the device graph by name.
        """
        flat = self.flatten_inputs(*args, **kwargs)
        executor = executor or cpu_reference_executor
        with torch.no_grad():
            values = list(self.pre(*flat)) if self.pre is not None else flat
            values = list(executor(self.graph, values, parameters))
            if self.post is not None:
                values = list(self.post(*values))
        return values

    def unflatten_outputs(self, flat: Sequence[torch.Tensor]) -> Any:
        """Rebuild the model's output structure (tuple, dict, ModelOutput ...) from flat outputs."""
        it = iter(flat)
        leaves = [next(it) if isinstance(o, torch.fx.Node) else o for o in self.program.output_leaves]
        if self.program.out_spec is None:
            return tuple(leaves)
        return pytree.tree_unflatten(leaves, self.program.out_spec)


def _unwrap(module: Any, graph_name: Optional[str]) -> Tuple[torch.nn.Module, str]:
    from pybuda.module import PyTorchModule

    if isinstance(module, PyTorchModule):
        return module.module, graph_name or module.name
    if isinstance(module, torch.nn.Module):
        return module, graph_name or type(module).__name__
    raise CompileError(f"capture expects a torch.nn.Module or a pybuda.PyTorchModule, got {type(module).__name__}",
                       stage=STAGE)


def _fallback_set(config: Any) -> Tuple[bool, set]:
    enabled = bool(getattr(config, "enable_tvm_cpu_fallback", True))
    names = set()
    for t in getattr(config, "cpu_fallback_ops", None) or []:
        names.add(str(t))
        names.add(str(t).replace("aten.", "").split(".")[0])
    return enabled, names


def capture(module: Union["torch.nn.Module", Any], sample_inputs: Any, graph_name: Optional[str] = None,
            config: Any = None, *, decompose: Union[bool, str] = "auto",
            input_parameters: Optional[Mapping[int, Tuple[str, torch.Tensor]]] = None,
            for_device: bool = False, training: bool = False) -> CaptureResult:
    """Capture a PyTorch model into a pybuda graph (plus CPU fallback stages).

    Args:
        module: a ``torch.nn.Module`` or a :class:`pybuda.PyTorchModule`.
        sample_inputs: a tensor, a tuple of positional inputs, or a dict of keyword inputs; their shapes
            and dtypes become the graph's (static) input shapes.
        graph_name: name of the graph (default: the PyTorchModule's name or the class name).
        config: a :class:`pybuda.config.CompilerConfig` (default: the global one); reads
            ``enable_tvm_cpu_fallback`` and ``cpu_fallback_ops``.
        decompose: run ``torch.export``'s decompositions: ``"auto"`` (only when the graph has in-place
            ops or ops without a direct mapping), True or False.
        input_parameters: turn user inputs (by flat position) into parameters ``(name, value)``; used
            by the torch.compile backend, which receives weights as inputs.
        for_device: the graph will be compiled for the chip, so ops the compiler cannot lower
            (``pybuda.passes.lower.capabilities``: integer math, ops without a lowering) count as unsupported
            too: they fall back to the CPU, or are listed in UnsupportedOpError with fallback off.
            Without it the graph only has to run on the CPU reference.
        training: the split will be trained: no parameter is read both by a CPU stage and by the device
            (:func:`pybuda.frontend.fallback.partition`'s ``one_side_parameters``).

    Raises:
        UnsupportedOpError: fallback is disabled and some ops have no mapping (lists every one with its
            ``file:line`` in the model code).
        CompileError: torch.export failed (e.g. data-dependent control flow; the message says so).
    """
    from pybuda.config import _get_global_compiler_config

    config = config if config is not None else _get_global_compiler_config()
    nn_module, name = _unwrap(module, graph_name)
    if nn_module.training and _mode_matters(nn_module):
        log.warning("model '%s' is in training mode: dropout stays random and batch norm uses batch "
                    "statistics (which the device does not support); call .eval() to capture for inference",
                    name)
    args, kwargs = fx_program.flatten_sample_inputs(sample_inputs)
    timings: Dict[str, float] = {}

    t = time.perf_counter()
    ep = fx_export.run_export(nn_module, args, kwargs, name)
    timings["export"] = time.perf_counter() - t

    keep = set(aten_map.CONVERTERS)
    t = time.perf_counter()
    fx_export.inline_wrapper_subgraphs(ep.graph_module)
    if decompose == "auto":
        fx_export.functionalize_inplace(ep.graph)
    if decompose is True or (decompose == "auto" and fx_export.needs_decompositions(ep, keep)):
        ep = fx_export.run_decompositions(ep, keep, name)
    timings["decompose"] = time.perf_counter() - t

    prog = fx_program.prepare(ep, name, nn_module, input_parameters)
    timings["fold"] = prog.timings["fold"]
    t = time.perf_counter()
    from pybuda.ops.integer import exact_moves

    with exact_moves(getattr(config, "exact_data_movement", None)):  # what the compile copies exactly
        result = _map_program(prog, config, for_device, training)
    timings["map"] = time.perf_counter() - t
    result.timings = timings
    result._kwarg_order = list(kwargs)
    log.debug("captured '%s': %s", name, ", ".join(f"{k} {v:.3f}s" for k, v in timings.items()))
    return result


#: torch.nn modules whose forward reads their ``training`` flag.
_MODE_MODULES = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._BatchNorm,
                 torch.nn.modules.instancenorm._InstanceNorm, torch.nn.RReLU)


def _mode_matters(module: "torch.nn.Module") -> bool:
    """Whether ``module``'s forward can depend on its ``training`` flag: it holds a torch.nn module that reads it
    (dropout, batch or instance norm, RReLU), or a module of its own whose code mentions ``training`` (a
    functional dropout's ``training=self.training``; code that cannot be read counts). A GraphModule that calls no
    submodule (what dynamo hands the torch.compile backend, always flagged as training) had each op's mode baked in
    when it was traced, so its flag means nothing."""
    if isinstance(module, torch.fx.GraphModule):
        return any(n.op == "call_module" for n in module.graph.nodes)
    return any(isinstance(m, _MODE_MODULES) or _reads_training(type(m)) for m in module.modules())


@functools.lru_cache(maxsize=None)
def _reads_training(cls: type) -> bool:
    """Whether a module class outside torch.nn mentions ``training`` in its source (read once per class)."""
    if cls.__module__.startswith("torch.nn.") or cls.__module__.startswith("torch.fx."):
        return False
    try:
        return "training" in inspect.getsource(cls)
    except (OSError, TypeError):
        return True


def split_for_devices(module: Any, sample_inputs: Any, graph_name: Optional[str] = None, config: Any = None):
    """Capture ``module`` and return ``(pre, device_graph, post)`` (see :mod:`pybuda.frontend.fallback`).

    ``pre``/``post`` are CPU callables (``torch.fx.GraphModule``) or None:
    ``pre(*flat_user_inputs) -> tuple`` matching ``device_graph.inputs`` in order, and
    ``post(*device_graph_outputs) -> tuple`` of the model's flat tensor outputs.
    """
    return capture(module, sample_inputs, graph_name=graph_name, config=config).split_for_devices()


# --- mapping --------------------------------------------------------------------------------------
def _initial_env(prog: FxProgram, graph: Graph, inputs: Sequence[torch.fx.Node],
                 lead: Collection[torch.fx.Node] = ()) -> Dict[torch.fx.Node, Any]:
    """Graph inputs, parameters and constants for the device graph; inputs in ``lead`` arrive with a leading
    sample dim (see :func:`fallback.not_batch_first`), which a reshape drops."""
    env: Dict[torch.fx.Node, Any] = {}
    for node in inputs:
        shape, dtype = fallback.tensor_meta(node)
        if node in lead:
            env[node] = fallback.add_sample_input(graph, node.name, shape, dtype)
            continue
        env[node] = graph.add_input(graph.unique_name(node.name), shape, dtype).name
    for node, (pname, tensor) in prog.params.items():
        value = tensor.detach()
        env[node] = graph.add_parameter(pname, value, requires_grad=bool(tensor.requires_grad)).name
    for node, value in prog.consts.items():
        env[node] = _const_value(value, prog.const_names.get(node, node.name))
    return env


def _const_value(value: Any, name: str) -> Any:
    if isinstance(value, torch.Tensor):
        return Const(value, name)
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_const_value(v, f"{name}.{i}") for i, v in enumerate(value))
    return value


def _standins(graph: Graph, node: torch.fx.Node) -> Any:
    """Placeholder inputs for an unmapped node, so the ops after it can still be checked."""
    def one(val: Any, suffix: str) -> Any:
        if isinstance(val, torch.Tensor):
            return graph.add_input(graph.unique_name(f"unmapped.{node.name}{suffix}"),
                                   tuple(int(d) for d in val.shape), val.dtype).name
        return Missing(f"result of unmapped op {node.name}")

    val = meta_val(node)
    if isinstance(val, (list, tuple)):
        return [one(v, f".{i}") for i, v in enumerate(val)]
    return one(val, "")


#: Registry ops that look pushed ids up (the capability check reads every reader of those ids).
_LOOKUPS = frozenset({"embedding", "adv_index"})


def _device_unsupported(graph: Graph, created: Sequence[str]) -> Optional[str]:
    """Why the chip cannot run one of the ops just created for an FX node (None if it can)."""
    from pybuda.passes.lower.capabilities import unsupported_reason

    for name in created:
        node = graph.nodes.get(name)
        if node is not None and node.kind == "op":
            reason = unsupported_reason(graph, node)
            if reason is not None:
                return reason
    return None


def _map_program(prog: FxProgram, config: Any, for_device: bool = False, training: bool = False) -> CaptureResult:
    enabled, fallback_names = _fallback_set(config)
    graph = Graph(prog.name)
    b = Builder(graph)
    env = _initial_env(prog, graph, prog.user_inputs)
    unsupported: Dict[torch.fx.Node, str] = {}
    host: Dict[torch.fx.Node, str] = {}
    # A cpu_fallback_ops op that reads no model input (a positional embedding looked up with constant
    # positions, say) computes the same value for every sample: it stays in the device graph, where
    # constant evaluation folds it at compile time. On the host it would become a device input with no
    # batch dimension, which a microbatch cannot carry.
    reads_inputs = fallback.downstream_of(prog.user_inputs, set(prog.compute))
    lookups: Dict[torch.fx.Node, List[str]] = {}  # nodes that made a lookup by ids: the ops they made
    for node in prog.compute:
        before = len(graph.nodes)
        try:
            env[node] = aten_map.convert_node(b, node, env)
        except Unsupported as e:
            unsupported[node] = str(e)
            env[node] = _standins(graph, node)
            continue
        if for_device:
            created = list(graph.nodes)[before:]
            reason = _device_unsupported(graph, created)
            if reason is not None:
                unsupported[node] = reason
                continue
            if any(graph[n].kind == "op" and graph[n].op_type in _LOOKUPS for n in created):
                lookups[node] = created
        if enabled and fallback_names and node in reads_inputs:
            hit = op_name(node.target) if op_name(node.target) in fallback_names else \
                next((t for t in b.op_types if t in fallback_names), None)
            if hit is not None:
                host[node] = f"'{hit}' is in cpu_fallback_ops"
    # A lookup's check reads every other reader of its pushed ids (ids pushed as digits serve nothing else), and
    # readers mapped after it were not in the graph when it was checked: check such lookups again on the whole graph.
    for node, created in lookups.items():
        reason = _device_unsupported(graph, created)
        if reason is not None:
            unsupported[node] = reason

    # A complex model output (held as two real tensors) leaves the device through the host.
    host.update({n: "its complex result is a model output (the device holds it as two real tensors)"
                 for n in prog.output_nodes if fallback.is_complex(n) and n in prog.compute and n not in unsupported})
    if unsupported and not enabled:
        raise UnsupportedOpError([UnsupportedOp(qualified_op_name(n.target), source_location(n), reason)
                                  for n, reason in unsupported.items()])
    host.update(unsupported)
    host = {n: host[n] for n in prog.compute if n in host}

    if not host:
        outputs = [o for o in prog.output_leaves if isinstance(o, torch.fx.Node)]
        out_names = _add_outputs(b, graph, outputs, env)
        graph.eliminate_dead_code()
        report = FallbackReport(prog.name, enabled, device_ops=len(prog.compute))
        return CaptureResult(graph, report, None, None, [n.name for n in prog.user_inputs], out_names, prog)

    part = fallback.partition(prog, host, one_side_parameters=training)
    plan = fallback.plan_stages(prog, part)
    pre = post = None
    shared: List[str] = []
    # Values the CPU stage hands the device whose dim 0 is not the samples' (a sequence-first RNN output): the
    # runtime cuts and joins pushes along dim 0, so they cross with a leading sample dim of their own.
    lead = fallback.not_batch_first(plan.pre_outputs, prog.user_inputs) if plan.pre_nodes else set()
    if plan.pre_nodes:
        pre, used = fallback.build_cpu_stage(prog, plan.pre_nodes, prog.user_inputs, plan.pre_outputs,
                                             f"{_class_name(prog.name)}CpuPre", lead=lead)
        shared += used
    if plan.post_nodes:
        final = [o for o in prog.output_leaves if isinstance(o, torch.fx.Node)]
        post, used = fallback.build_cpu_stage(prog, plan.post_nodes, plan.device_outputs, final,
                                              f"{_class_name(prog.name)}CpuPost")
        shared += used

    graph = Graph(prog.name)
    b = Builder(graph)
    env = _initial_env(prog, graph, plan.device_inputs, lead)
    for node in plan.device_nodes:
        try:
            env[node] = aten_map.convert_node(b, node, env)
        except Unsupported as e:  # mapped fine in the first pass; anything else is a frontend bug
            raise CompileError(f"mapping '{node.name}' ({qualified_op_name(node.target)}) failed after the CPU "
                               f"fallback split: {e}", stage=STAGE, op=node.name) from None
    dev_outputs = [o for o in plan.device_outputs if isinstance(o, torch.fx.Node)]
    out_names = _add_outputs(b, graph, dev_outputs, env)
    graph.eliminate_dead_code()
    device_params = {n.name for n in graph.parameters}
    report = FallbackReport(prog.name, enabled, part.decisions, fallback.describe(plan.pre_nodes),
                            fallback.describe(plan.post_nodes), len(plan.device_nodes),
                            sorted(set(shared) & device_params))
    if not fallback.warn_if_large(report):
        log.info("%s", report)
    return CaptureResult(graph, report, pre, post, [n.name for n in prog.user_inputs], out_names, prog)


def _class_name(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() else "_" for ch in name)
    return (cleaned[:1].upper() + cleaned[1:]) if cleaned else "Model"


def _add_outputs(b: Builder, graph: Graph, outputs: Sequence[torch.fx.Node], env: Mapping[torch.fx.Node, Any]) -> List[str]:
    names = []
    b.node = None
    for node in outputs:
        value = env[node]
        if isinstance(value, Missing):
            raise CompileError(f"model output '{node.name}' is a value pybuda does not compute ({value.reason})",
                               stage=STAGE)
        src = b.tensor(value)
        if graph[src].kind != OP:
            # Outputs that are inputs, parameters or constants pass through a nop, as in TT-Buda.
            src = graph.add_op(graph.unique_name(f"{node.name}.passthrough"), "nop", [src]).name
        out = graph.add_output(graph.unique_name(f"{graph.name}.output_{node.name}"), src)
        names.append(out.name)
    return names
