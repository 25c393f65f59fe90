"""The framework-neutral graph IR: a DAG of named nodes in insertion (topological) order.

Node kinds: ``input`` (activations pushed by the user), ``parameter`` (weights), ``constant``
(values known at compile time), ``op`` (a registry op applied to operand nodes) and ``output``
(marks a value the graph returns). Ops are validated against the registry when added, so a Graph is
always shape-consistent. Parameter and constant values live in ``Graph.tensors``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch

from pybuda.errors import ModuleError
from pybuda.ops import registry

INPUT, PARAMETER, CONSTANT, OP, OUTPUT = "input", "parameter", "constant", "op", "output"
NODE_KINDS = (INPUT, PARAMETER, CONSTANT, OP, OUTPUT)


def dtype_name(dtype: torch.dtype) -> str:
    """'float32' for torch.float32, and so on (stable, JSON-friendly)."""
    return str(dtype).replace("torch.", "")


def dtype_from_name(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ModuleError(f"unknown dtype '{name}'")
    return dt


@dataclass
class Node:
    """One node of a Graph. ``operands`` are node names; ``attrs`` are the op's validated attributes."""

    name: str
    kind: str
    shape: Tuple[int, ...]
    dtype: torch.dtype = torch.float32
    op_type: Optional[str] = None
    operands: List[str] = field(default_factory=list)
    attrs: Dict[str, Any] = field(default_factory=dict)
    requires_grad: bool = False
    tags: Dict[str, Any] = field(default_factory=dict)  # e.g. layer, source location, fallback reason

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"name": self.name, "kind": self.kind, "shape": list(self.shape),
                             "dtype": dtype_name(self.dtype)}
        if self.op_type is not None:
            d["op_type"] = self.op_type
        if self.operands:
            d["operands"] = list(self.operands)
        if self.attrs:
            d["attrs"] = _jsonable(self.attrs)
        if self.requires_grad:
            d["requires_grad"] = True
        if self.tags:
            d["tags"] = _jsonable(self.tags)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Node":
        return cls(name=d["name"], kind=d["kind"], shape=tuple(d["shape"]), dtype=dtype_from_name(d["dtype"]),
                   op_type=d.get("op_type"), operands=list(d.get("operands", [])),
                   attrs=_from_jsonable(d.get("attrs", {})), requires_grad=d.get("requires_grad", False),
                   tags=dict(d.get("tags", {})))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.dtype):
        return {"__dtype__": dtype_name(value)}
    if hasattr(value, "name") and hasattr(value, "value") and type(value).__module__.startswith("pybuda"):
        return {"__enum__": type(value).__name__, "name": value.name}
    return value


def _from_jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        if "__dtype__" in value:
            return dtype_from_name(value["__dtype__"])
        if "__enum__" in value:
            from pybuda import tensor as _t

            return getattr(_t, value["__enum__"])[value["name"]]
        return {k: _from_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_from_jsonable(v) for v in value)
    return value


class Graph:
    """A named DAG of :class:`Node` in insertion order (which is always a topological order)."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.nodes: Dict[str, Node] = {}
        self.tensors: Dict[str, torch.Tensor] = {}  # values of parameter and constant nodes
        self.microbatch: int = 1

    # --- building ------------------------------------------------------------------------------
    def _add(self, node: Node) -> Node:
        if node.name in self.nodes:
            raise ModuleError(f"graph '{self.name}' already has a node named '{node.name}'")
        for operand in node.operands:
            if operand not in self.nodes:
                raise ModuleError(f"node '{node.name}' uses '{operand}', which is not in graph '{self.name}'")
        self.nodes[node.name] = node
        return node

    def add_input(self, name: str, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                  requires_grad: bool = False) -> Node:
        return self._add(Node(name, INPUT, tuple(shape), dtype, requires_grad=requires_grad))

    def add_parameter(self, name: str, value: torch.Tensor, requires_grad: bool = True) -> Node:
        self.tensors[name] = value
        return self._add(Node(name, PARAMETER, tuple(value.shape), value.dtype, requires_grad=requires_grad))

    def add_constant(self, name: str, value: torch.Tensor) -> Node:
        self.tensors[name] = value
        return self._add(Node(name, CONSTANT, tuple(value.shape), value.dtype))

    def add_op(self, name: str, op_type: str, operands: Sequence[str], attrs: Optional[Mapping[str, Any]] = None,
               tags: Optional[Mapping[str, Any]] = None) -> Node:
        """Add an op node; the registry validates operand count, attributes and shapes."""
        for operand in operands:
            if operand not in self.nodes:
                raise ModuleError(f"op '{name}' uses '{operand}', which is not in graph '{self.name}'")
        ins = [self.nodes[o] for o in operands]
        shape, dtype, full_attrs = registry.infer(op_type, [n.shape for n in ins], [n.dtype for n in ins],
                                                  attrs or {}, op_name=name)
        requires_grad = any(n.requires_grad for n in ins)
        return self._add(Node(name, OP, shape, dtype, op_type, list(operands), full_attrs, requires_grad,
                              dict(tags or {})))

    def add_output(self, name: str, source: str) -> Node:
        src = self.nodes[source]
        return self._add(Node(name, OUTPUT, src.shape, src.dtype, operands=[source],
                              requires_grad=src.requires_grad))

    def remove(self, name: str) -> None:
        """Remove a node that nothing uses any more."""
        users = self.users(name)
        if users:
            raise ModuleError(f"cannot remove '{name}': used by {users}")
        del self.nodes[name]
        self.tensors.pop(name, None)

    # --- queries -------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Node]:
        return iter(list(self.nodes.values()))

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def __contains__(self, name: str) -> bool:
        return name in self.nodes

    def of_kind(self, kind: str) -> List[Node]:
        return [n for n in self.nodes.values() if n.kind == kind]

    @property
    def inputs(self) -> List[Node]:
        return self.of_kind(INPUT)

    @property
    def parameters(self) -> List[Node]:
        return self.of_kind(PARAMETER)

    @property
    def constants(self) -> List[Node]:
        return self.of_kind(CONSTANT)

    @property
    def ops(self) -> List[Node]:
        return self.of_kind(OP)

    @property
    def outputs(self) -> List[Node]:
        return self.of_kind(OUTPUT)

    def users(self, name: str) -> List[str]:
        return [n.name for n in self.nodes.values() if name in n.operands]

    def user_map(self) -> Dict[str, List[str]]:
        """Every node's users, computed in one pass (use in passes that ask for many nodes)."""
        out: Dict[str, List[str]] = {n: [] for n in self.nodes}
        for node in self.nodes.values():
            for operand in node.operands:
                if node.name not in out[operand]:
                    out[operand].append(node.name)
        return out

    def unique_name(self, base: str) -> str:
        if base not in self.nodes:
            return base
        i = 1
        while f"{base}_{i}" in self.nodes:
            i += 1
        return f"{base}_{i}"

    def copy(self) -> "Graph":
        g = Graph(self.name)
        g.microbatch = self.microbatch
        for n in self.nodes.values():
            g.nodes[n.name] = Node(n.name, n.kind, n.shape, n.dtype, n.op_type, list(n.operands), dict(n.attrs),
                                   n.requires_grad, dict(n.tags))
        g.tensors = dict(self.tensors)
        return g

    # --- printing and serialisation --------------------------------------------------------------
    def __str__(self) -> str:
        from pybuda.ir.printer import format_graph

        return format_graph(self)

    def to_dict(self) -> Dict[str, Any]:
        """Structure only; tensor values are saved separately (see :meth:`save`)."""
        return {"name": self.name, "microbatch": self.microbatch, "nodes": [n.to_dict() for n in self.nodes.values()]}

    def to_json(self, indent: Optional[int] = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], tensors: Optional[Mapping[str, torch.Tensor]] = None) -> "Graph":
        g = cls(d["name"])
        g.microbatch = d.get("microbatch", 1)
        for nd in d["nodes"]:
            g._add(Node.from_dict(nd))
        g.tensors = dict(tensors or {})
        return g

    @classmethod
    def from_json(cls, text: str, tensors: Optional[Mapping[str, torch.Tensor]] = None) -> "Graph":
        return cls.from_dict(json.loads(text), tensors)

    def save(self, path_prefix: str) -> None:
        """Write ``<prefix>.json`` (structure) and ``<prefix>.safetensors`` (values); no pickles."""
        from safetensors.torch import save_file

        with open(path_prefix + ".json", "w") as f:
            f.write(self.to_json())
        save_file({k: v.contiguous() for k, v in self.tensors.items()}, path_prefix + ".safetensors")

    @classmethod
    def load(cls, path_prefix: str) -> "Graph":
        from safetensors.torch import load_file

        with open(path_prefix + ".json") as f:
            text = f.read()
        return cls.from_json(text, load_file(path_prefix + ".safetensors"))
