"""A deterministic, readable text form of a Graph (one line per node)."""

from __future__ import annotations

from typing import Any

from pybuda.ir import graph as g


def _fmt_attr(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_fmt_attr(v) for v in value) + "]"
    if hasattr(value, "name") and not isinstance(value, str):
        return str(value.name)
    return repr(value) if isinstance(value, str) else str(value).replace("torch.", "")


def format_node(node: "g.Node") -> str:
    ty = f"{list(node.shape)} {g.dtype_name(node.dtype)}"
    if node.kind == g.OP:
        args = ", ".join(f"%{o}" for o in node.operands)
        attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in node.attrs.items() if v is not None)
        attrs = f" {{{attrs}}}" if attrs else ""
        return f"  %{node.name} = {node.op_type}({args}){attrs} : {ty}"
    if node.kind == g.OUTPUT:
        return f"  output %{node.name} = %{node.operands[0]} : {ty}"
    grad = " requires_grad" if node.requires_grad else ""
    return f"  {node.kind} %{node.name} : {ty}{grad}"


def format_graph(graph: "g.Graph") -> str:
    lines = [f"graph {graph.name} (microbatch={graph.microbatch}) {{"]
    lines += [format_node(n) for n in graph.nodes.values()]
    lines.append("}")
    return "\n".join(lines)
