"""Graph IR: :class:`Graph`, :class:`Node`, the printer and JSON (de)serialisation."""

from pybuda.ir.graph import CONSTANT, INPUT, OP, OUTPUT, PARAMETER, Graph, Node  # noqa: F401
