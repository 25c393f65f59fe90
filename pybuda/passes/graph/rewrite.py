"""A small helper to rebuild an ``ir.Graph`` node by node (used by the graph passes).

Graph passes never edit a graph in place: they walk the old graph in order and emit a new one, which
keeps the "insertion order is a topological order" invariant for free and lets every new op be
validated by the registry (shapes, attributes) as it is added.
"""

from __future__ import annotations

from typing import AbstractSet, Any, Callable, Dict, Mapping, Optional, Sequence

import torch

from pybuda.ir.graph import CONSTANT, INPUT, OP, OUTPUT, PARAMETER, Graph, Node

#: ``rule(rewriter, node, operands) -> new name or None``; None copies the node unchanged.
Rule = Callable[["Rewriter", Node, Sequence[str]], Optional[str]]


class Rewriter:
    """Emits a new graph while mapping old node names to the names of their replacements."""

    def __init__(self, old: Graph):
        self.old = old
        self.new = Graph(old.name)
        self.new.microbatch = old.microbatch
        self.map: Dict[str, str] = {}
        #: Values the rules of one run share (keyed by each rule's own name): nodes emitted once and read by several
        #: rewritten ops, such as the digits of ids that lookups in several tables share.
        self.shared: Dict[str, Any] = {}

    # --- emitting ---------------------------------------------------------------------------------
    def unique(self, base: str) -> str:
        """A node name not yet used in the new graph, derived from ``base``."""
        name = base
        i = 1
        while name in self.new.nodes:
            name = f"{base}_{i}"
            i += 1
        return name

    def op(self, name: str, op_type: str, operands: Sequence[str], attrs: Optional[Mapping[str, Any]] = None,
           tags: Optional[Mapping[str, Any]] = None) -> str:
        """Add an op node (validated by the registry) under a unique name derived from ``name``."""
        node = self.new.add_op(self.unique(name), op_type, list(operands), dict(attrs or {}), tags)
        return node.name

    def constant(self, name: str, value: torch.Tensor, tags: Optional[Mapping[str, Any]] = None) -> str:
        """Add a constant node holding ``value``."""
        node = self.new.add_constant(self.unique(name), value)
        if tags:
            node.tags.update(tags)
        return node.name

    def parameter(self, name: str, value: torch.Tensor, requires_grad: bool,
                  tags: Optional[Mapping[str, Any]] = None) -> str:
        """Add a parameter node holding ``value``."""
        node = self.new.add_parameter(self.unique(name), value, requires_grad)
        if tags:
            node.tags.update(tags)
        return node.name

    def copy_leaf(self, node: Node) -> str:
        """Copy an input, parameter or constant node (name, value, tags) into the new graph."""
        if node.kind == INPUT:
            new = self.new.add_input(node.name, node.shape, node.dtype, node.requires_grad)
        elif node.kind == PARAMETER:
            new = self.new.add_parameter(node.name, self.old.tensors[node.name], node.requires_grad)
        else:
            new = self.new.add_constant(node.name, self.old.tensors[node.name])
        new.tags.update(node.tags)
        return new.name

    def copy_op(self, node: Node, operands: Sequence[str]) -> str:
        """Copy an op node onto new operands, keeping its name when free."""
        return self.op(node.name, node.op_type, operands, node.attrs, node.tags)

    def shape(self, new_name: str):
        """Shape of a node of the new graph."""
        return self.new.nodes[new_name].shape

    def node(self, new_name: str) -> Node:
        """A node of the new graph."""
        return self.new.nodes[new_name]

    # --- driving ----------------------------------------------------------------------------------
    def run(self, rule: Rule) -> Graph:
        """Walk the old graph in order; ``rule`` handles op nodes (None = copy unchanged)."""
        for node in self.old:
            if node.kind in (INPUT, PARAMETER, CONSTANT):
                self.map[node.name] = self.copy_leaf(node)
            elif node.kind == OP:
                operands = [self.map[o] for o in node.operands]
                new_name = rule(self, node, operands)
                self.map[node.name] = new_name if new_name is not None else self.copy_op(node, operands)
            elif node.kind == OUTPUT:
                out = self.new.add_output(node.name, self.map[node.operands[0]])
                out.tags.update(node.tags)
                self.map[node.name] = out.name
        return self.prune()

    def prune(self) -> Graph:
        """Drop nodes nothing reaches from an output (inputs are always kept, in their order)."""
        graph = self.new
        live = set()
        stack = [n.name for n in graph.outputs]
        while stack:
            name = stack.pop()
            if name in live:
                continue
            live.add(name)
            stack.extend(graph.nodes[name].operands)
        for name in [n for n in graph.nodes if n not in live and graph.nodes[n].kind != INPUT]:
            del graph.nodes[name]
            graph.tensors.pop(name, None)
        return graph


def is_leaf_value(graph: Graph, name: str) -> bool:
    """True for parameter and constant nodes (values known at compile time)."""
    return graph.nodes[name].kind in (PARAMETER, CONSTANT)


def source_through(graph: Graph, users: Mapping[str, Sequence[str]], name: str, reader: str,
                   through: AbstractSet[str]) -> Optional[Node]:
    """The node ``name`` (read by ``reader``) comes from: walking back through single-operand ops whose type is
    in ``through``, the first node that is not one; None when a link on the way (``name`` included) has a
    reader besides the next one, so a pass that rewrites the source would change what another op reads."""
    while list(users.get(name, ())) == [reader]:
        node = graph[name]
        if node.kind != OP or node.op_type not in through or len(node.operands) != 1:
            return node
        reader, name = name, node.operands[0]
    return None
