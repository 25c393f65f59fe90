"""Expanding ONNX function ops into their function bodies before import.

Many ONNX ops (Attention, RMSNormalization, the losses, GroupNormalization, Shrink, Swish …) are *function
ops*: their schema carries a body of simpler ops, either fixed or built for the node's attributes and input
types (a context-dependent function). A node of such a type that the importer has no converter for is
replaced by its body (:func:`expand_functions`), so each body node maps onto registry ops or falls back on
its own, instead of the whole op running on the host. Model-local functions are inlined first
(``onnx.inliner``). Ops with a converter keep it (a direct mapping beats the generic body).
"""

from __future__ import annotations

import logging
from typing import Any, Collection, Dict, List, Optional, Sequence

from pybuda.frontend.onnx.model import default_opset, onnx

log = logging.getLogger(__name__)

#: Rounds of expansion (a body may hold further function ops, whose input types need another inference).
MAX_ROUNDS = 6


def function_body(node: "onnx.NodeProto", opset: int,
                  input_types: Sequence["onnx.TypeProto"]) -> Optional["onnx.FunctionProto"]:
    """The function body ONNX defines for ``node`` (default domain) at ``opset``, or None when its op has
    none (or the body cannot be built for these input types)."""
    if node.domain not in ("", "ai.onnx"):
        return None
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:  # an op unknown at this opset: the checker would have said so
        return None
    text = None
    try:
        fixed = [v for v in schema.function_opset_versions if v <= opset]
        dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
        if dependent and (not fixed or max(dependent) >= max(fixed)):
            text = schema.get_context_dependent_function_with_opset_version(
                max(dependent), _with_defaults(node, schema).SerializeToString(),
                [t.SerializeToString() for t in input_types])
        elif fixed:
            text = schema.get_function_with_opset_version(max(fixed))
    except Exception as e:  # the builder rejects these attributes or input types
        log.debug("no function body for %s: %s", node.op_type, e)
        return None
    if not text:
        return None
    body = onnx.FunctionProto()
    body.ParseFromString(text)
    return body if len(body.node) else None


def _with_defaults(node: "onnx.NodeProto", schema: Any) -> "onnx.NodeProto":
    """A copy of ``node`` carrying every attribute the schema gives a default for (bodies refer to them)."""
    full = onnx.NodeProto()
    full.CopyFrom(node)
    have = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():
        if name not in have and attr.default_value is not None and attr.default_value.name:
            full.attribute.append(attr.default_value)
    return full


def _inline_body(node: "onnx.NodeProto", body: "onnx.FunctionProto", prefix: str,
                 schema_node: "onnx.NodeProto") -> List["onnx.NodeProto"]:
    """The body's nodes with the node's inputs/outputs and attributes substituted, internal names prefixed."""
    names: Dict[str, str] = {}
    for k, formal in enumerate(body.input):
        names[formal] = node.input[k] if k < len(node.input) else ""
    for k, formal in enumerate(body.output):
        if k < len(node.output) and node.output[k]:
            names[formal] = node.output[k]
    attrs = {a.name: a for a in schema_node.attribute}

    def rename(n: str) -> str:
        if not n:
            return ""
        return names.setdefault(n, prefix + n)

    out = []
    for k, inner in enumerate(body.node):
        new = onnx.NodeProto()
        new.CopyFrom(inner)
        del new.input[:]
        del new.output[:]
        del new.attribute[:]
        new.input.extend(rename(n) for n in inner.input)
        new.output.extend(rename(n) for n in inner.output)
        new.name = f"{prefix}{k}_{inner.op_type}"
        for a in inner.attribute:
            if a.ref_attr_name:
                if a.ref_attr_name in attrs:  # else the inner op's own default applies
                    ref = onnx.AttributeProto()
                    ref.CopyFrom(attrs[a.ref_attr_name])
                    ref.name = a.name
                    new.attribute.append(ref)
            elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                return []  # bodies with subgraphs (If/Loop/Scan) are not inlined: renaming them needs scoping
            else:
                new.attribute.append(a)
        out.append(new)
    return out


def expand_functions(model: "onnx.ModelProto", mapped: Collection[str]) -> "onnx.ModelProto":
    """``model`` with model-local functions inlined and every default-domain node whose op type is not in
    ``mapped`` (the importer's converters) but has an ONNX function body replaced by that body, recursively.
    Returns ``model`` itself when nothing changes."""
    if len(model.functions):
        try:
            from onnx import inliner

            model = inliner.inline_local_functions(model)
        except Exception as e:  # keep the calls: they run on the host
            log.debug("inlining local functions failed: %s", e)
    opset = default_opset(model)
    for _ in range(MAX_ROUNDS):
        todo = [i for i, n in enumerate(model.graph.node) if n.domain in ("", "ai.onnx") and n.op_type not in mapped]
        if not todo:
            break
        types = _value_types(model)
        nodes: List["onnx.NodeProto"] = []
        changed = False
        used = {n.name for n in model.graph.node}
        for i, node in enumerate(model.graph.node):
            body = None
            if i in todo:
                body = function_body(node, opset, [types.get(n, onnx.TypeProto()) for n in node.input])
            if body is None or any(imp.domain in ("", "ai.onnx") and imp.version > opset for imp in body.opset_import):
                nodes.append(node)
                continue
            schema = onnx.defs.get_schema(node.op_type, opset, "")
            base = (node.name or f"{node.op_type.lower()}_{i}") + "/"
            prefix, k = base, 1
            while any(u.startswith(prefix) for u in used):
                prefix, k = f"{base[:-1]}_{k}/", k + 1
            inlined = _inline_body(node, body, prefix, _with_defaults(node, schema))
            if not inlined:
                nodes.append(node)
                continue
            used.update(n.name for n in inlined)
            nodes.extend(inlined)
            changed = True
        if not changed:
            break
        expanded = onnx.ModelProto()
        expanded.CopyFrom(model)
        del expanded.graph.node[:]
        expanded.graph.node.extend(nodes)
        model = expanded
    return model


def _value_types(model: "onnx.ModelProto") -> Dict[str, "onnx.TypeProto"]:
    """Type of every value shape inference can type (inputs, initializers, intermediates)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        inferred = model
    g = inferred.graph
    types = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    for t in g.initializer:
        tp = onnx.TypeProto()
        tp.tensor_type.elem_type = t.data_type
        for d in t.dims:
            tp.tensor_type.shape.dim.add().dim_value = int(d)
        types[t.name] = tp
    return types
