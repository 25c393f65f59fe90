"""Step 1a of the PyTorch frontend: ``torch.export`` a module and rewrite the exported program for mapping.

:func:`run_export` runs ``torch.export.export`` on the sample inputs (their shapes and dtypes become static)
and turns its failures into :class:`~pybuda.errors.CompileError` messages naming the model (data-dependent
control flow, outputs pybuda cannot flatten); Hugging Face cache outputs are flattened first
(:func:`register_cache_pytrees`). Then the export-level rewrites, each only where it helps:
:func:`inline_wrapper_subgraphs` (``no_grad``/disabled-autocast wrappers), :func:`functionalize_inplace`
(in-place ops on private intermediates) and :func:`run_decompositions` when :func:`needs_decompositions`
says so. Step 1b, :func:`pybuda.frontend.fx_program.prepare`, turns the result into an ``FxProgram``.
"""

from __future__ import annotations

import logging
import operator
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import torch
import torch.fx

from pybuda.errors import CompileError
from pybuda.frontend import source_lines
from pybuda.frontend.fx_program import (_DROPPED, _FRAME, _SHAPE_ONLY, _TORCH_DIR, STAGE, _foldable, bind,
                                        op_name)

log = logging.getLogger(__name__)

_DATA_DEPENDENT_MARKERS = ("data-dependent", "GuardOnDataDependentSymNode", "data dependent",
                           "Could not guard on", "Could not extract specialized integer")


def _is_data_dependent(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = f"{type(exc).__name__}: {exc}"
        if any(m in text for m in _DATA_DEPENDENT_MARKERS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _essential_lines(exc: BaseException) -> str:
    """The first line of torch's message plus the user frame it points at (when it gives one)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    where = ""
    m = re.search(r"The following call raised this error:\s*\n\s*(File .+?)\n\s*(.+?)\n", text + "\n")
    if m:
        where = f" at {m.group(1).strip()}: {m.group(2).strip()}"
    else:
        frames = [f for f in _FRAME.findall(text) if not f[0].startswith(_TORCH_DIR)]
        if frames:
            where = f" at {frames[-1][0]}:{frames[-1][1]}"
    return f"{type(exc).__name__}: {first}{where}"


def _uses_transformers(module: torch.nn.Module) -> bool:
    return any(type(m).__module__.startswith("transformers.") for m in module.modules())


_CACHE_PYTREES_REGISTERED = False


def register_cache_pytrees(module: torch.nn.Module) -> bool:
    """Teach torch's pytree the cache objects of Hugging Face decoders (``DynamicCache`` ...).

    A decoder LLM called with its default config (``use_cache=True``) returns its key/value cache next to
    the logits. Registered as pytree nodes, the cache flattens into one key and one value tensor per
    layer: they become ordinary graph outputs (computed on the device like the logits), and
    :meth:`pybuda.frontend.torch.CaptureResult.unflatten_outputs` rebuilds the cache object. A user who
    wants only the logits passes ``use_cache=False`` (in the sample inputs or the model config) and the
    graph has no cache outputs at all. The registration is the one transformers' own exporters use; it is
    process-wide and done once. Returns whether cache types are (now) registered.
    """
    global _CACHE_PYTREES_REGISTERED
    if _CACHE_PYTREES_REGISTERED or not _uses_transformers(module):
        return _CACHE_PYTREES_REGISTERED
    try:  # transformers >= 5: every Cache subclass, plus model-specific cache classes
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model
    except ImportError:
        register_cache_pytrees_for_model = None
    try:
        if register_cache_pytrees_for_model is not None:
            register_cache_pytrees_for_model(module)
        else:  # transformers 4.x: DynamicCache only
            from transformers.integrations.executorch import register_dynamic_cache_export_support

            register_dynamic_cache_export_support()
    except Exception as e:  # an older or newer transformers without these helpers: export says what failed
        log.debug("could not register transformers cache pytrees: %s", e)
        return False
    _CACHE_PYTREES_REGISTERED = True
    return True


_UNKNOWN_OUTPUT = re.compile(r"Found <class '([^']+)'> in output, which is not a known type")


def run_export(module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Mapping[str, Any], name: str):
    """``torch.export.export`` with errors turned into :class:`CompileError` naming the model.

    Hugging Face cache objects in the outputs are flattened into tensors (:func:`register_cache_pytrees`).
    """
    register_cache_pytrees(module)
    try:
        with source_lines.recording():  # each node's model source line, without torch's full stack traces
            return torch.export.export(module, tuple(args), kwargs=dict(kwargs) if kwargs else None, strict=False)
    except Exception as e:  # torch raises many unrelated exception types here
        unknown = _UNKNOWN_OUTPUT.search(str(e))
        if unknown:
            raise CompileError(
                f"model '{name}' returns a '{unknown.group(1)}', which pybuda cannot flatten into tensors. "
                f"Return tensors (or tuples/dicts of them) from forward(); for a Hugging Face decoder that "
                f"returns a cache, pass use_cache=False to get the logits alone.", stage=STAGE) from e
        if _is_data_dependent(e):
            where = _model_frame(e)
            raise CompileError(
                f"model '{name}' has data-dependent control flow (a Python branch, loop bound or shape "
                f"that depends on tensor values){' at ' + where if where else ''}, which cannot be captured as "
                f"a static graph: {_essential_lines(e)}. Rewrite the branch with torch.where / torch.cond, or "
                f"run the model on a CPUDevice.", stage=STAGE) from e
        raise CompileError(f"model '{name}' could not be captured with torch.export: {_essential_lines(e)}",
                           stage=STAGE) from e


def _model_frame(e: BaseException) -> str:
    """``file:line `code``` of the innermost frame of ``e``'s traceback in the model's code (not in torch,
    pybuda or the standard library): where the model asked for a tensor's value. Empty when there is none."""
    import linecache
    import os
    import sysconfig

    skip = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch,) if getattr(m, "__file__", None))
    skip += (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
             sysconfig.get_paths()["stdlib"] + os.sep)
    found = ""
    tb = e.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith(skip) and not filename.startswith("<"):
            code = linecache.getline(filename, tb.tb_lineno).strip()
            found = f"{filename}:{tb.tb_lineno}" + (f" `{code}`" if code else "")
        tb = tb.tb_next
    return found


def has_mutations(graph: torch.fx.Graph) -> bool:
    """True when the graph still holds in-place or out= ops (export's training IR may)."""
    for node in graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            if node.target._schema.is_mutable:
                return True
    return False


def needs_decompositions(ep, keep: Set[str]) -> bool:
    """Decompose only when it helps: mutations to functionalize, or ops with no direct mapping.

    ``run_decompositions`` costs about as much as the export itself on large models, so a graph made
    only of ops the mapper handles directly skips it. Ops that only compute constants (from buffers,
    ``arange`` ...) do not count: they are folded at capture time whatever they are.
    """
    from torch.export.graph_signature import InputKind

    const_inputs = {spec.arg.name for spec in ep.graph_signature.input_specs
                    if spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR) and hasattr(spec.arg, "name")}
    constant: Set[torch.fx.Node] = set()
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            if node.name in const_inputs:
                constant.add(node)
            continue
        if node.op == "get_attr":
            constant.add(node)
            continue
        if node.op != "call_function":
            continue
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            return True
        if all(d in constant for d in node.all_input_nodes) and _foldable(node):
            constant.add(node)
            continue
        if isinstance(target, torch._ops.OpOverload):
            name = op_name(target)
            if name not in keep and name not in _DROPPED and name not in _SHAPE_ONLY and _decomposable(target):
                return True
    return False


def _decomposable(target: torch._ops.OpOverload) -> bool:
    # Ops in the Core-ATen table, and composite ops (defined in terms of other ATen ops), which
    # run_decompositions always expands.
    if target in decomposable_ops():
        return True
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(target.name(), "CompositeImplicitAutograd")
    except Exception:  # pragma: no cover - private API moved
        return True


_DECOMPOSABLE: Optional[Set[Any]] = None


def decomposable_ops() -> Set[Any]:
    """ATen overloads that torch.export's default table can decompose (computed once)."""
    global _DECOMPOSABLE
    if _DECOMPOSABLE is None:
        _DECOMPOSABLE = set(torch.export.default_decompositions().keys())
    return _DECOMPOSABLE


def _hop_inline_plan(node: torch.fx.Node) -> Optional[Tuple[torch.fx.Node, Sequence[Any]]]:
    """(subgraph get_attr node, operands) when ``node`` is a grad-mode/autocast wrapper safe to inline."""
    name = getattr(node.target, "__name__", "") or getattr(node.target, "name", lambda: "")()
    if name == "wrap_with_set_grad_enabled":
        sub, operands = node.args[1], node.args[2:]
    elif name == "wrap_with_autocast":
        if node.args[2]:  # autocast enabled: inlining would change the numerics
            return None
        sub, operands = node.args[4], node.args[5:]
    else:
        return None
    if not isinstance(sub, torch.fx.Node) or sub.op != "get_attr":
        return None
    return sub, operands


def inline_wrapper_subgraphs(gm: torch.fx.GraphModule) -> int:
    """Inline ``wrap_with_set_grad_enabled`` (and disabled ``wrap_with_autocast``) subgraphs.

    torch.export wraps code under ``torch.no_grad()``/``autocast(enabled=False)`` (rotary embeddings,
    for instance) in such higher-order ops; for inference the wrapper means nothing, and inlining it
    lets the ops inside map (and fold) like any other. Returns how many wrappers were inlined.
    """
    graph = gm.graph
    count = 0
    changed = True
    while changed:
        changed = False
        for node in list(graph.nodes):
            if node.op != "call_function" or not isinstance(node.target, torch._ops.HigherOrderOperator):
                continue
            plan = _hop_inline_plan(node)
            if plan is None:
                continue
            sub_attr, operands = plan
            sub = getattr(gm, sub_attr.target)
            env: Dict[torch.fx.Node, Any] = {}
            placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
            env.update(zip(placeholders, operands))
            outputs: Any = ()
            with graph.inserting_before(node):
                for sn in sub.graph.nodes:
                    if sn.op == "placeholder":
                        continue
                    if sn.op == "output":
                        outputs = torch.fx.node.map_arg(sn.args[0], env.__getitem__)
                        continue
                    if sn.op == "get_attr":
                        value = getattr(sub, sn.target)
                        attr = f"_inlined_{sub_attr.target}_{sn.target}".replace(".", "_")
                        setattr(gm, attr, value)
                        env[sn] = graph.get_attr(attr)
                        env[sn].meta = dict(sn.meta)
                        continue
                    env[sn] = graph.node_copy(sn, env.__getitem__)
            outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
            for user in list(node.users):
                if user.target is operator.getitem:
                    user.replace_all_uses_with(outputs[user.args[1]])
                    graph.erase_node(user)
            if node.users:
                return count  # used as a whole tuple somewhere: leave it (it will fall back)
            graph.erase_node(node)
            if not sub_attr.users:
                graph.erase_node(sub_attr)
            count += 1
            changed = True
    if count:
        graph.lint()
        gm.recompile()
    return count


def _is_view(target: Any) -> bool:
    if not isinstance(target, torch._ops.OpOverload):
        return target is operator.getitem  # items of split/unbind alias their input
    returns = target._schema.returns
    return any(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _functional_variant(target: torch._ops.OpOverload) -> Optional[torch._ops.OpOverload]:
    name = op_name(target)
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    overload = getattr(packet, target._overloadname, None) if packet is not None else None
    return overload if isinstance(overload, torch._ops.OpOverload) and not overload._schema.is_mutable else None


def functionalize_inplace(graph: torch.fx.Graph) -> bool:
    """Rewrite in-place ops on private intermediates (``x += y``, ``relu_``) into functional ops.

    Only provably safe cases are rewritten: the mutated tensor is the first argument, was produced by
    a non-aliasing op, and nothing reads it after the mutation except through the in-place op's
    result. Returns False (and changes nothing) when any other mutation remains; the caller then runs
    torch's full functionalization (``run_decompositions``), which is much slower on large models.
    """
    order = {n: i for i, n in enumerate(graph.nodes)}
    plan: List[Tuple[torch.fx.Node, torch._ops.OpOverload]] = []
    no_ops: List[torch.fx.Node] = []
    for node in graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        if not target._schema.is_mutable:
            continue
        if op_name(target) in _INPLACE_DROPOUT:
            args = bind(target, node.args, node.kwargs)
            if not args.get("train") or not args.get("p"):
                no_ops.append(node)  # eval-mode in-place dropout changes nothing
                continue
        functional = _functional_variant(target)
        writes = [i for i, a in enumerate(target._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
        if functional is None or writes != [0] or not node.args or not isinstance(node.args[0], torch.fx.Node):
            return False
        mutated = node.args[0]
        if mutated.op != "call_function" or _is_view(mutated.target):
            return False
        if isinstance(mutated.target, torch._ops.OpOverload) and mutated.target._schema.is_mutable and \
                not any(p[0] is mutated for p in plan):
            return False
        for user in mutated.users:
            if user is not node and (order[user] > order[node] or _is_view(user.target)):
                return False
        plan.append((node, functional))
    for node, functional in plan:
        node.target = functional
    for node in no_ops:
        node.replace_all_uses_with(node.args[0])
        graph.erase_node(node)
    return True


_INPLACE_DROPOUT = {"dropout_", "feature_dropout_", "alpha_dropout_", "feature_alpha_dropout_"}


def decomposition_table(keep: Set[str]):
    """Core-ATen decompositions minus the ops the mapper handles directly (they map better whole)."""
    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        if op_name(op) in keep:
            table.pop(op)
    return table


def run_decompositions(ep, keep: Set[str], name: str):
    """Decompose to a Core-ATen-like set, keeping the high-level ops in ``keep``."""
    try:
        return ep.run_decompositions(decomposition_table(keep))
    except Exception as e:
        raise CompileError(f"model '{name}': decomposing the exported graph failed: {_essential_lines(e)}",
                           stage=STAGE) from e
