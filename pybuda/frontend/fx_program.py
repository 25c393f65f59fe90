"""Step 1b of the PyTorch frontend: prepare an exported program's FX graph for mapping.

:func:`prepare` takes the ``ExportedProgram`` that :mod:`pybuda.frontend.fx_export` made (``torch.export``
on the sample inputs, whose shapes and dtypes became static, and its rewrites), then walks the graph once to

- sort placeholders into user inputs, parameters (state-dict names kept), and constants (buffers,
  lifted tensor constants);
- fold constant subexpressions: a call whose operands are all known at capture time (constants,
  buffers, shapes) is evaluated right here with torch and becomes a constant; ops that only read their
  operand's shape (``zeros_like``, ``new_ones``, ``sym_size`` ...) fold even on activations;
- drop assertion-only nodes (``_assert_tensor_metadata`` ...);
- list the remaining compute nodes in topological order, and the flat model outputs.

The result, :class:`FxProgram`, is what the ATen mapper (:mod:`pybuda.frontend.aten_map`) and the CPU
fallback partitioner (:mod:`pybuda.frontend.fallback`) read. Nothing here knows about pybuda ops. The
small FX vocabulary both steps and the mapper share (:func:`op_name`, :func:`meta_val`, :func:`bind`, source
locations) lives here too.
"""

from __future__ import annotations

import logging
import operator
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree

from pybuda.errors import CompileError, UnsupportedOp, UnsupportedOpError
from pybuda.frontend import source_lines

log = logging.getLogger(__name__)

STAGE = "GENERATE_INITIAL_GRAPH"

# Folding a constant that would be larger than this (elements) is skipped: the op stays in the graph
# and maps like any other, so a model cannot blow up host memory at capture time.
FOLD_MAX_ELEMENTS = 1 << 24

_aten = torch.ops.aten

# Calls that only check things at trace time; they produce no value the model uses.
_DROPPED = {
    "_assert_tensor_metadata", "_assert_async", "_assert_scalar", "sym_constrain_range",
    "sym_constrain_range_for_size", "_functional_sym_constrain_range",
    "_functional_sym_constrain_range_for_size", "_functional_assert_async", "_functional_assert_scalar",
}

# Ops whose result depends only on the *shape/dtype* of their tensor operands (and scalars), never on
# the values: they fold even when the operand is an activation, because capture shapes are static.
_SHAPE_ONLY = {
    "zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "new_full", "new_empty",
    "sym_size", "sym_numel", "sym_stride", "sym_storage_offset", "size", "numel", "dim", "scalar_tensor",
}

# ``empty*`` results are uninitialised memory in torch; fold them to zeros so captures are deterministic.
_EMPTY_AS_ZEROS = {"empty", "empty_like", "new_empty", "empty_strided", "empty_permuted"}


def op_name(target: Any) -> str:
    """Short name of an FX call target: ``'add'`` for ``aten.add.Tensor``, ``'getitem'`` for getitem."""
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return packet.__name__
    return getattr(target, "__name__", str(target))


def qualified_op_name(target: Any) -> str:
    """Full name for reports: ``'aten.add.Tensor'``, ``'operator.getitem'``."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    mod = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", str(target))
    if mod in ("_operator", "operator"):
        mod = "operator"
    return f"{mod}.{name}" if mod else name


# --- source locations -----------------------------------------------------------------------------
_TORCH_DIR = source_lines.TORCH_DIR
_PYBUDA_FRONTEND_DIR = source_lines.FRONTEND_DIR
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def source_location(node: torch.fx.Node) -> str:
    """``file:line`` of the model code that created ``node`` (the last frame outside torch itself).

    Falls back to ``<module path>`` from ``nn_module_stack`` when torch recorded no stack trace.
    """
    trace = node.meta.get("stack_trace")
    if trace:
        frames = _FRAME.findall(trace)
        user = [f for f in frames if not f[0].startswith(_TORCH_DIR) and not f[0].startswith(_PYBUDA_FRONTEND_DIR)]
        pick = (user or frames)[-1] if frames else None
        if pick is not None:
            return f"{pick[0]}:{pick[1]}"
    layer = module_path(node)
    return f"<{layer or 'model'}>"


def source_code_line(node: torch.fx.Node) -> str:
    """The text of the source line :func:`source_location` points at (empty when unknown)."""
    trace = node.meta.get("stack_trace") or ""
    lines = trace.splitlines()
    loc = source_location(node)
    for i, line in enumerate(lines):
        m = _FRAME.search(line)
        if m and f"{m.group(1)}:{m.group(2)}" == loc and i + 1 < len(lines):
            return lines[i + 1].strip()
    return ""


def module_path(node: torch.fx.Node) -> str:
    """Dotted path of the innermost ``nn.Module`` that ran ``node`` ('' for the root module)."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path if isinstance(path, str) else ""


# --- the prepared program -------------------------------------------------------------------------
@dataclass
class FxProgram:
    """An exported, constant-folded FX graph ready to be mapped onto pybuda ops.

    ``consts`` maps FX nodes to values known at capture time (tensors, or Python values such as the
    tuple a folded ``split`` returns); ``params`` maps parameter placeholders to (state-dict name,
    tensor); ``compute`` lists the nodes that remain to run, in topological order.
    """

    name: str
    exported: Any  # torch.export.ExportedProgram (None for graphs handed over by torch.compile)
    graph_module: torch.fx.GraphModule
    user_inputs: List[torch.fx.Node]
    input_names: List[str]
    params: Dict[torch.fx.Node, Tuple[str, torch.Tensor]]
    consts: Dict[torch.fx.Node, Any]
    const_names: Dict[torch.fx.Node, str]
    compute: List[torch.fx.Node]
    output_leaves: List[Any]  # fx.Node (tensor output) or a Python value (constant output)
    out_spec: Any
    in_spec: Any
    timings: Dict[str, float] = field(default_factory=dict)
    dropped_mutations: List[str] = field(default_factory=list)

    @property
    def output_nodes(self) -> List[torch.fx.Node]:
        """The flat outputs that are graph values (in output order), constants excluded."""
        return [o for o in self.output_leaves if isinstance(o, torch.fx.Node)]


def meta_val(node: torch.fx.Node) -> Any:
    """The FakeTensor (or list/tuple of them, or SymInt) torch recorded as ``node``'s value."""
    return node.meta.get("val", node.meta.get("example_value"))


_SCHEMA_CACHE: Dict[Any, Tuple[Tuple[str, Any], ...]] = {}


def bind(target: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """An ATen call's arguments by schema name, defaults filled in (None where there is no default).

    Non-ATen targets give ``{"args": [...], **kwargs}``.
    """
    if not isinstance(target, torch._ops.OpOverload):
        return {"args": list(args), **kwargs}
    spec = _SCHEMA_CACHE.get(target)
    if spec is None:
        spec = tuple((a.name, a.default_value if a.has_default_value() else None) for a in target._schema.arguments)
        _SCHEMA_CACHE[target] = spec
    out: Dict[str, Any] = {}
    for i, (name, default) in enumerate(spec):
        if i < len(args):
            out[name] = args[i]
        elif name in kwargs:
            out[name] = kwargs[name]
        else:
            out[name] = default
    return out


# --- preparation ----------------------------------------------------------------------------------
def _foldable(node: torch.fx.Node) -> bool:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        if torch.Tag.nondeterministic_seeded in getattr(target, "tags", ()):
            return False
        if target._schema.is_mutable:
            return False
        name = op_name(target)
        if "dropout" in name:
            return False
        return True
    # Python-level calls (getitem, operator.* on sizes, math functions) are pure.
    return target is operator.getitem or getattr(target, "__module__", "") in ("_operator", "operator", "math",
                                                                              "torch.fx.experimental.sym_node")


def _unbacked(value: Any) -> Set[Any]:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    try:
        return set(free_unbacked_symbols(value))
    except Exception:  # pragma: no cover - values torch cannot walk hold no symbols we care about
        return set()


def check_static_shapes(graph: torch.fx.Graph, name: str) -> None:
    """Raise :class:`UnsupportedOpError` naming every op whose output shape depends on tensor values.

    ``torch.nonzero``, boolean-mask indexing (``x[x > 0]``), ``torch.unique`` and the like export with
    *unbacked* symbolic sizes. A device graph (and the CPU-fallback split, whose stage boundaries need
    static shapes) is compiled for fixed shapes, so such a model cannot run here; without this check the
    first pass that needs a concrete size fails with torch's raw ``GuardOnDataDependentSymNode``. Only
    the ops that *introduce* an unknown size are listed (their inputs have static shapes): those are
    the lines the user has to change.
    """
    found: List[UnsupportedOp] = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        new = _unbacked(node.meta.get("val"))
        if not new:
            continue
        for dep in node.all_input_nodes:
            new -= _unbacked(dep.meta.get("val"))
        if new:
            found.append(UnsupportedOp(qualified_op_name(node.target), source_location(node),
                                       "its output shape depends on the tensor values (data-dependent), but "
                                       "pybuda compiles for static shapes; compute it outside the model or use "
                                       "a fixed-size form (e.g. torch.where with a mask)"))
    if found:
        raise UnsupportedOpError(found, stage=STAGE)


def _effectful_ops(graph: torch.fx.Graph) -> List[UnsupportedOp]:
    """The ops export threaded an effect token through (``with_effects``: a linalg op's error check such as
    ``_linalg_check_errors`` of ``torch.linalg.inv``, a print): named with their source lines, so a model using
    them fails with the op, not with the token input the capture cannot take."""
    found: List[UnsupportedOp] = []
    for node in graph.nodes:
        if node.op == "call_function" and "with_effects" in str(node.target) and len(node.args) > 1:
            op = node.args[1]
            what = qualified_op_name(op) if hasattr(op, "_schema") else str(op)
            found.append(UnsupportedOp(what, source_location(node),
                                       "an op with side effects (export threads an effect token through it: an "
                                       "error check of a linalg op, a print); pybuda captures side-effect-free "
                                       "graphs - compute it outside the module or on a CPUDevice"))
    return found


def _zeros_for(val: Any) -> Any:
    if isinstance(val, torch.Tensor):
        return torch.zeros(tuple(int(d) for d in val.shape), dtype=val.dtype)
    return val


def _is_empty(val: Any) -> bool:
    """Whether ``val`` is one tensor with no elements."""
    return isinstance(val, torch.Tensor) and any(int(d) == 0 for d in val.shape)


def _numel(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (list, tuple)):
        return sum(_numel(v) for v in value)
    return 0


def prepare(ep, name: str, module: Optional[torch.nn.Module] = None,
            input_parameters: Optional[Mapping[int, Tuple[str, torch.Tensor]]] = None) -> FxProgram:
    """Sort placeholders, fold constants and list compute nodes of an ExportedProgram.

    ``input_parameters`` turns some user inputs (by position) into parameters, for graphs that receive
    their weights as arguments (torch.compile hands modules over that way).
    """
    from torch.export.graph_signature import InputKind, OutputKind

    t0 = time.perf_counter()
    gm = ep.graph_module
    sig = ep.graph_signature
    check_static_shapes(gm.graph, name)
    input_parameters = dict(input_parameters or {})
    spec_by_name = {spec.arg.name: spec for spec in sig.input_specs if hasattr(spec.arg, "name")}

    user_inputs: List[torch.fx.Node] = []
    params: Dict[torch.fx.Node, Tuple[str, torch.Tensor]] = {}
    consts: Dict[torch.fx.Node, Any] = {}
    const_names: Dict[torch.fx.Node, str] = {}
    compute: List[torch.fx.Node] = []
    user_index = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            spec = spec_by_name.get(node.name)
            kind = spec.kind if spec is not None else InputKind.USER_INPUT
            if kind == InputKind.USER_INPUT:
                if user_index in input_parameters:
                    params[node] = input_parameters[user_index]
                else:
                    val = meta_val(node)
                    if isinstance(val, torch.Tensor):
                        user_inputs.append(node)
                    else:
                        # A non-tensor argument was specialised by export; its value is fixed.
                        consts[node] = val
                user_index += 1
            elif kind == InputKind.PARAMETER:
                params[node] = (spec.target, ep.state_dict[spec.target])
            elif kind == InputKind.BUFFER:
                value = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
                consts[node] = value.detach()
                const_names[node] = spec.target
            elif kind in (InputKind.CONSTANT_TENSOR, getattr(InputKind, "CUSTOM_OBJ", None)):
                consts[node] = ep.constants[spec.target]
                const_names[node] = spec.target
            else:  # TOKEN and other internal inputs
                effects = _effectful_ops(gm.graph)
                if effects:
                    raise UnsupportedOpError(effects, stage=STAGE)
                raise CompileError(f"model '{name}': unsupported exported input kind {kind} for '{node.name}'",
                                   stage=STAGE)
        elif node.op == "get_attr":
            value = gm
            for part in node.target.split("."):
                value = getattr(value, part)
            consts[node] = value
            const_names[node] = node.target
        elif node.op == "call_function":
            oname = op_name(node.target)
            if oname in _DROPPED:
                continue
            deps = node.all_input_nodes
            if _is_empty(meta_val(node)) and _foldable(node):
                # A zero-size result is known at capture time whatever its operands hold (an empty slice,
                # the "pass" half of a rotary split over the whole head): concatenations drop it.
                consts[node] = _zeros_for(meta_val(node))
                continue
            if all(d in consts for d in deps) and _foldable(node):
                value = _try_fold(node, consts)
                if value is not _NOT_FOLDED:
                    consts[node] = value
                    continue
            elif oname in _SHAPE_ONLY or (oname in _EMPTY_AS_ZEROS and all(d in consts for d in deps)):
                value = _try_fold(node, consts, shape_only=True)
                if value is not _NOT_FOLDED:
                    consts[node] = value
                    continue
            compute.append(node)
        elif node.op == "output":
            outputs_node = node
        else:
            raise CompileError(f"model '{name}': unexpected FX node kind '{node.op}' ({node.name})", stage=STAGE)

    # Outputs: only USER_OUTPUT values are model outputs; buffer/input mutations (e.g. BatchNorm running
    # stats in training mode) are dropped, as inference on a device does not update them.
    flat_out = list(outputs_node.args[0])
    leaves: List[Any] = []
    dropped: List[str] = []
    for spec, value in zip(sig.output_specs, flat_out):
        if spec.kind == OutputKind.USER_OUTPUT:
            if isinstance(value, torch.fx.Node) and _is_empty(meta_val(value)):
                raise CompileError(f"model '{name}': output {len(leaves)} is empty (shape "
                                   f"{list(meta_val(value).shape)}); the device makes no zero-size tensors: "
                                   f"leave it out of the model's outputs", stage=STAGE)
            leaves.append(value)
        else:
            dropped.append(f"{spec.kind.name}:{getattr(spec, 'target', '')}")
    if dropped:
        log.warning("model '%s': ignoring state updates the model makes while running (%s); "
                    "capture the model in eval() mode to avoid them", name, ", ".join(dropped))

    # torch.export names user-input placeholders after the forward() arguments (nested inputs get
    # suffixes); those become the graph's input names.
    in_spec = out_spec = None
    if ep.module_call_graph:
        in_spec = ep.module_call_graph[0].signature.in_spec
        out_spec = ep.module_call_graph[0].signature.out_spec
    prog = FxProgram(name=name, exported=ep, graph_module=gm, user_inputs=user_inputs,
                     input_names=[p.name for p in user_inputs], params=params, consts=consts,
                     const_names=const_names, compute=compute, output_leaves=leaves, out_spec=out_spec,
                     in_spec=in_spec, dropped_mutations=dropped)
    prog.timings["fold"] = time.perf_counter() - t0
    return prog


_NOT_FOLDED = object()


def _try_fold(node: torch.fx.Node, consts: Mapping[torch.fx.Node, Any], shape_only: bool = False) -> Any:
    def value_of(n: torch.fx.Node) -> Any:
        if n in consts:
            return consts[n]
        return _zeros_for(meta_val(n))  # shape-only ops: any values of the right shape will do

    args = torch.fx.node.map_arg(node.args, value_of)
    kwargs = torch.fx.node.map_arg(node.kwargs, value_of)
    target = node.target
    oname = op_name(target)
    try:
        with torch.no_grad():
            value = target(*args, **kwargs)
    except Exception as e:  # leave it to the mapper, which will say what is wrong
        log.debug("could not fold %s (%s): %s", node.name, qualified_op_name(target), e)
        return _NOT_FOLDED
    if oname in _EMPTY_AS_ZEROS and isinstance(value, torch.Tensor):
        value = torch.zeros_like(value)
    if _numel(value) > FOLD_MAX_ELEMENTS:
        return _NOT_FOLDED
    if isinstance(value, torch.Tensor):
        value = value.detach()
        # Folded views may alias a buffer; own the memory so later in-place use cannot change it.
        if value._base is not None:
            value = value.clone()
    return value


def flatten_sample_inputs(sample_inputs: Any) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """Normalise sample inputs to (args, kwargs): a tensor, a tuple/list of them, or a dict of kwargs."""
    from pybuda.tensor import Tensor as BudaTensor, _as_torch

    def conv(v: Any) -> Any:
        if isinstance(v, BudaTensor):
            return _as_torch(v)
        try:
            import numpy as np

            if isinstance(v, np.ndarray):
                return torch.from_numpy(v)
        except ImportError:  # pragma: no cover
            pass
        return v

    if isinstance(sample_inputs, dict):
        return (), {k: pytree.tree_map(conv, v) for k, v in sample_inputs.items()}
    if isinstance(sample_inputs, (torch.Tensor, BudaTensor)):
        return (conv(sample_inputs),), {}
    return tuple(pytree.tree_map(conv, v) for v in sample_inputs), {}
