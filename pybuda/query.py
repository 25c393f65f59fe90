"""Node predicates: ``pybuda.query`` (TT-Buda's ``NodePredicateBuilder``).

``name_regex(r)``, ``layer_regex(r)`` and ``op_type(t)`` build predicates over the ops of the compiled
graph; ``a & b``, ``a | b``, ``a.negate()`` (also ``~a``) combine them. A predicate is accepted wherever
TT-Buda accepted one: ``set_epoch_break``, ``set_chip_break`` and ``override_op_placement``. It is resolved
against the lowered graph at compile time (``pybuda.passes.lowered.overrides``).

Regular expressions match the *whole* name (TT-Buda evaluated them with C++ ``std::regex_match``), so
``name_regex("fc")`` matches the op ``fc`` but not ``fc1``; write ``name_regex("fc.*")`` for a prefix.
"""

from __future__ import annotations

import enum
import re
from functools import lru_cache
from typing import Any, Dict, Optional


class NodePredicateType(enum.Enum):
    Negate = 1
    And = 2
    Or = 3
    NameRegex = 4
    LayerRegex = 5
    OpType = 6


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> "re.Pattern[str]":
    return re.compile(pattern)


class NodePredicateBuilder:
    """A predicate over ops: a leaf (name regex, layer regex, op type) or a combination of predicates."""

    def __init__(self, ty: NodePredicateType, value: Any):
        from pybuda.errors import ConfigError

        if ty in (NodePredicateType.NameRegex, NodePredicateType.LayerRegex, NodePredicateType.OpType):
            if not isinstance(value, str):
                raise ConfigError(f"pybuda.query.{_LEAF_NAMES[ty]}: expected a string, got {value!r}")
            if ty != NodePredicateType.OpType:
                try:
                    _compiled(value)
                except re.error as e:
                    raise ConfigError(f"pybuda.query.{_LEAF_NAMES[ty]}({value!r}): bad regular expression: {e}") \
                        from None
        elif ty == NodePredicateType.Negate:
            if not isinstance(value, NodePredicateBuilder):
                raise ConfigError(f"negate: expected a NodePredicateBuilder, got {value!r}")
        elif not (isinstance(value, tuple) and len(value) == 2
                  and all(isinstance(v, NodePredicateBuilder) for v in value)):
            raise ConfigError(f"'{ty.name}' combines two NodePredicateBuilders, got {value!r}")
        self.ty = ty
        self.value = value

    # --- combinators (TT-Buda's) ---------------------------------------------------------------------
    def negate(self) -> "NodePredicateBuilder":
        return NodePredicateBuilder(NodePredicateType.Negate, self)

    def __invert__(self) -> "NodePredicateBuilder":
        return self.negate()

    def __and__(self, other: "NodePredicateBuilder") -> "NodePredicateBuilder":
        return NodePredicateBuilder(NodePredicateType.And, (self, other))

    def __or__(self, other: "NodePredicateBuilder") -> "NodePredicateBuilder":
        return NodePredicateBuilder(NodePredicateType.Or, (self, other))

    # --- evaluation ----------------------------------------------------------------------------------
    def matches(self, name: str, op_type: Optional[str] = None, layer: Optional[str] = None,
                original_op_type: Optional[str] = None) -> bool:
        """Whether an op named ``name`` of netlist type ``op_type`` (or framework type
        ``original_op_type``) in layer ``layer`` satisfies the predicate."""
        ty = self.ty
        if ty == NodePredicateType.Negate:
            return not self.value.matches(name, op_type, layer, original_op_type)
        if ty == NodePredicateType.And:
            return all(v.matches(name, op_type, layer, original_op_type) for v in self.value)
        if ty == NodePredicateType.Or:
            return any(v.matches(name, op_type, layer, original_op_type) for v in self.value)
        if ty == NodePredicateType.NameRegex:
            return _compiled(self.value).fullmatch(name) is not None
        if ty == NodePredicateType.LayerRegex:
            return _compiled(self.value).fullmatch(layer if layer is not None else name) is not None
        return self.value in (op_type, original_op_type)

    # --- JSON (TT-Buda's form) -----------------------------------------------------------------------
    def to_json(self) -> Dict[str, Any]:
        if self.ty == NodePredicateType.Negate:
            value: Any = self.value.to_json()
        elif self.ty in (NodePredicateType.And, NodePredicateType.Or):
            value = [self.value[0].to_json(), self.value[1].to_json()]
        else:
            value = self.value
        return {"type": self.ty.name, "value": value}

    @staticmethod
    def from_json(j: Dict[str, Any]) -> "NodePredicateBuilder":
        ty = NodePredicateType[j["type"]]
        value = j["value"]
        if ty == NodePredicateType.Negate:
            return NodePredicateBuilder(ty, NodePredicateBuilder.from_json(value))
        if ty in (NodePredicateType.And, NodePredicateType.Or):
            return NodePredicateBuilder(ty, (NodePredicateBuilder.from_json(value[0]),
                                             NodePredicateBuilder.from_json(value[1])))
        return NodePredicateBuilder(ty, value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodePredicateBuilder) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        if self.ty == NodePredicateType.Negate:
            return f"~{self.value!r}"
        if self.ty == NodePredicateType.And:
            return f"({self.value[0]!r} & {self.value[1]!r})"
        if self.ty == NodePredicateType.Or:
            return f"({self.value[0]!r} | {self.value[1]!r})"
        return f"{_LEAF_NAMES[self.ty]}({self.value!r})"


_LEAF_NAMES = {NodePredicateType.NameRegex: "name_regex", NodePredicateType.LayerRegex: "layer_regex",
               NodePredicateType.OpType: "op_type"}


def name_regex(regex: str) -> NodePredicateBuilder:
    """Ops whose whole name matches ``regex``."""
    return NodePredicateBuilder(NodePredicateType.NameRegex, regex)


def layer_regex(regex: str) -> NodePredicateBuilder:
    """Ops whose layer (the framework op they were lowered from) matches ``regex``."""
    return NodePredicateBuilder(NodePredicateType.LayerRegex, regex)


def op_type(name: str) -> NodePredicateBuilder:
    """Ops of netlist type ``name`` (``matmul``, ``add`` ...) or lowered from a framework op of that type."""
    return NodePredicateBuilder(NodePredicateType.OpType, name)
