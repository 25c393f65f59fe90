"""The netlist rule framework: :class:`NetlistRuleError`, the ``@rule`` registry, the rule context and
shared key-path helpers and format sets. The rules themselves live in ``rules_*.py``; :mod:`pybuda.netlist.validate`
imports them in order and runs them."""


from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from pybuda.arch.descriptor import DeviceDescriptor
from pybuda.errors import NetlistError
from pybuda.netlist.model import GraphDef, Netlist, NetlistOp
from pybuda.netlist.tms import Transpose
from pybuda.dtypes import DataFormat as DF

class NetlistRuleError(NetlistError):
    """A netlist broke validation rule ``rule`` at YAML key path ``path``."""

    def __init__(self, rule: str, path: str, message: str):
        self.rule = rule
        super().__init__(path, f"[{rule}] {message}")


Rule = Callable[["Ctx"], Iterable[Tuple[str, str]]]
#: (name, rule) in the order they run. A rule yields (key path, message) pairs.
RULES: List[Tuple[str, Rule]] = []


#: Names of gating rules: when one fails, validation stops there (see :func:`gate`).
GATES: Set[str] = set()


def rule(fn: Rule) -> Rule:
    """Register ``fn`` as a validation rule named after the function."""
    RULES.append((fn.__name__, fn))
    return fn


def gate(fn: Rule) -> Rule:
    """Register ``fn`` as a gating rule: later rules rely on it (e.g. that sizes are bounded before they
    enumerate cores), so validation runs it even when only other rules are asked for, and stops after
    it when it fails."""
    GATES.add(fn.__name__)
    return rule(fn)


@dataclass
class Ctx:
    """What every rule sees: the netlist, the optional device and the resolved arch."""

    netlist: Netlist
    device: Optional[DeviceDescriptor]
    arch: Optional[str]
    _op_graphs: Dict[str, List[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for graph in self.netlist.graphs.values():
            for name in graph.ops:
                self._op_graphs.setdefault(name, []).append(graph.name)

    @property
    def is_gs(self) -> bool:
        """True when the resolved arch is Grayskull."""
        return self.arch == "grayskull"

    @property
    def is_wh_a0(self) -> bool:
        """True for the pre-production ``wormhole`` (A0) arch."""
        return self.arch == "wormhole"

    def graphs_of_op(self, name: str) -> List[str]:
        """Graphs that define an op of this name."""
        return self._op_graphs.get(name, [])

    def producer_op(self, name: str) -> Optional[NetlistOp]:
        """The op of this name (first definition), or None."""
        graphs = self._op_graphs.get(name)
        return self.netlist.graphs[graphs[0]].ops[name] if graphs else None

    def ops(self) -> Iterator[Tuple[GraphDef, NetlistOp]]:
        """Every (graph, op)."""
        return self.netlist.iter_ops()

    def input_tile_dim(self, op: NetlistOp, index: int) -> Tuple[int, int]:
        """Tile shape of input ``index`` as unpacked: the producer's, swapped by an odd number of transposes."""
        name = op.inputs[index]
        if name in self.netlist.queues:
            dim = self.netlist.queues[name].effective_tile_dim
        else:
            producer = self.producer_op(name)
            dim = producer.effective_tile_dim if producer else op.effective_tile_dim
        if sum(isinstance(tm, Transpose) for tm in op.tms_of(index)) % 2:
            dim = (dim[1], dim[0])
        return dim


def _q(name: str, key: Optional[str] = None) -> str:
    return f"queues.{name}" + (f".{key}" if key else "")


def _o(graph: GraphDef, op: NetlistOp, key: Optional[str] = None) -> str:
    return f"graphs.{graph.name}.{op.name}" + (f".{key}" if key else "")


def _a(graph: GraphDef, op: NetlistOp, attr: str) -> str:
    return _o(graph, op, f"attributes.{attr}")


def _tms_path(graph: GraphDef, op: NetlistOp, index: int) -> str:
    return _o(graph, op, f"input_{index}_tms")


INT_FORMATS = {DF.Int8, DF.UInt8, DF.Int32}
INT_INPUT_FORMATS = {DF.Int8, DF.UInt8, DF.Int32, DF.UInt16}
ACC_FORMATS = {DF.Float16, DF.Float16_b, DF.Float32, DF.Int32}
EXP_A = {DF.Float16, DF.Bfp8, DF.Bfp4, DF.Bfp2}
EXP_B = {DF.Float16_b, DF.Bfp8_b, DF.Bfp4_b, DF.Bfp2_b}
LOW_BFP = {DF.Bfp4, DF.Bfp4_b, DF.Bfp2, DF.Bfp2_b}
RAW_FORMATS = {DF.RawUInt8, DF.RawUInt16, DF.RawUInt32}


def _positive_pair(p: Tuple[int, int]) -> bool:
    return all(isinstance(v, int) and v > 0 for v in p)


def _targets(value) -> Tuple[int, ...]:
    return (value,) if isinstance(value, int) else tuple(value)
