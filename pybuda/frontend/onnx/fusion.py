"""Node patterns of exported ONNX models that map onto one registry op.

Exporters without an ONNX ``Gelu`` (opset < 20) write the exact GELU as ``x * 0.5 * (1 + erf(x / sqrt(2)))``:
five nodes, of which Erf has no chip kernel (its device form is some twenty SFPU/FPU ops). The chip has a
GELU kernel, and the PyTorch twin of such a model captures one ``gelu`` op: :func:`gelu_chains` finds the
pattern so the importer emits that op instead. Only chains whose intermediate values feed nothing else are
taken; if the chain has to run on the host, ONNX Runtime runs the original nodes.
"""

from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from pybuda.frontend.onnx.model import numpy_helper, onnx

_SQRT2 = math.sqrt(2.0)


def _scalars(nodes: Sequence["onnx.NodeProto"], inits: Mapping[str, np.ndarray]) -> Dict[str, float]:
    """Values that are one-element constants: initializers and Constant nodes."""
    out: Dict[str, float] = {}
    for k, v in inits.items():
        a = np.asarray(v)
        if a.size == 1 and a.dtype.kind == "f":
            out[k] = float(a.reshape(-1)[0])
    for n in nodes:
        if n.op_type == "Constant" and n.output and n.attribute:
            a = n.attribute[0]
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                t = numpy_helper.to_array(a.t)
                if t.size == 1 and t.dtype.kind == "f":
                    out[n.output[0]] = float(t.reshape(-1)[0])
            elif a.name == "value_float":
                out[n.output[0]] = float(a.f)
    return out


def gelu_chains(nodes: Sequence["onnx.NodeProto"], inits: Mapping[str, np.ndarray],
                graph_outputs: Sequence[str]) -> Dict[int, Tuple[str, List[int]]]:
    """``{index of the chain's last node: (x, indices of the chain's other nodes)}`` for every exact-GELU
    chain ``Mul(Mul(x, Add(Erf(x / sqrt 2), 1)), 0.5)`` (either Mul first; Div by sqrt 2 or Mul by its
    inverse; operands in either order)."""
    scal = _scalars(nodes, inits)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    users: Dict[str, List[int]] = {}
    for i, n in enumerate(nodes):
        for v in n.input:
            users.setdefault(v, []).append(i)
    outs = set(graph_outputs)

    def near(v: str, want: float) -> bool:
        return v in scal and abs(scal[v] - want) <= 1e-5 * max(1.0, abs(want))

    def only_user(v: str) -> Optional[int]:
        u = users.get(v, [])
        return u[0] if len(u) == 1 and v not in outs else None

    def other(node: "onnx.NodeProto", v: str) -> Optional[str]:
        if len(node.input) != 2 or v not in node.input:
            return None
        return node.input[1] if node.input[0] == v else node.input[0]

    final: Dict[int, Tuple[str, List[int]]] = {}
    for ie, erf in enumerate(nodes):
        if erf.op_type != "Erf" or erf.input[0] not in producer:
            continue
        idv = producer[erf.input[0]]
        div = nodes[idv]
        if div.op_type == "Div" and len(div.input) == 2 and near(div.input[1], _SQRT2):
            x = div.input[0]
        elif div.op_type == "Mul" and len(div.input) == 2 and (near(div.input[1], 1 / _SQRT2) or
                                                                near(div.input[0], 1 / _SQRT2)):
            x = div.input[0] if near(div.input[1], 1 / _SQRT2) else div.input[1]
        else:
            continue
        if only_user(div.output[0]) != ie:
            continue
        ia = only_user(erf.output[0])
        if ia is None or nodes[ia].op_type != "Add" or not near(other(nodes[ia], erf.output[0]) or "", 1.0):
            continue
        im = only_user(nodes[ia].output[0])
        if im is None or nodes[im].op_type != "Mul":
            continue
        p = other(nodes[im], nodes[ia].output[0])
        if p == x:  # x * (1 + erf) then * 0.5
            ih = only_user(nodes[im].output[0])
            if ih is None or nodes[ih].op_type != "Mul" or not near(other(nodes[ih], nodes[im].output[0]) or "", 0.5):
                continue
            final[ih] = (x, [idv, ie, ia, im])
        elif p in producer and nodes[producer[p]].op_type == "Mul":  # (x * 0.5) * (1 + erf)
            ih = producer[p]
            if other(nodes[ih], x) is None or not near(other(nodes[ih], x), 0.5) or only_user(p) != im:
                continue
            final[im] = (x, [idv, ie, ia, ih])
    return final
