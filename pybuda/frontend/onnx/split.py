"""Where an imported ONNX model splits between the host and the device: the mixin of
:class:`pybuda.frontend.onnx.importer._Importer` that applies the torch frontend's fallback rule
(:func:`pybuda.frontend.fallback.partition`) to ONNX nodes, says which values cannot cross the device boundary, and
plans the values that cross between the CPU pre stage, the device and the CPU post stage.

It reads the importer's ``nodes``, ``labels``, ``info`` (static shape and dtype per value), ``elem``,
``samples_run``, ``inits``, ``bind`` and nothing else.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np
import torch

from pybuda.frontend.fallback import FallbackOp, assign_sides
from pybuda.frontend.onnx.converter import STAGE
from pybuda.frontend.onnx.model import onnx

PRE, DEVICE, POST = "pre", "device", "post"


class SplitPlanner:
    """The host/device split of the importer's nodes (a mixin: see the module docstring)."""

    def _describe(self, idx: Sequence[int]) -> List[str]:
        return [f"{self.labels[i]} ({self.nodes[i].op_type})" for i in idx]

    def _partition(self, compute: List[int], host: Mapping[int, str],
                   force: Optional[str] = None) -> Tuple[Dict[int, str], List[FallbackOp]]:
        """The torch frontend's rule (:func:`pybuda.frontend.fallback.partition`) over ONNX nodes; ``force``
        (PRE or POST) puts every host node on that side instead, with all its ancestors or descendants."""
        cset = set(compute)
        producer = {o: i for i in compute for o in self.nodes[i].output if o}
        users: Dict[int, Set[int]] = {i: set() for i in compute}
        for i in compute:
            for n in self._reads(self.nodes[i]):
                p = producer.get(n)
                if p is not None:
                    users[p].add(i)

        def closure(start: int, up: bool) -> Set[int]:
            seen: Set[int] = set()
            stack = [start]
            while stack:
                k = stack.pop()
                nexts = [producer[n] for n in self._reads(self.nodes[k]) if n in producer] if up else users[k]
                for m in nexts:
                    if m in cset and m not in seen:
                        seen.add(m)
                        stack.append(m)
            return seen

        anc = {u: closure(u, True) for u in host}
        desc = {u: closure(u, False) for u in host}
        if force is None:
            side, pre, post = assign_sides(host, anc, desc, STAGE)
        else:
            side = {u: force for u in host}
            reach = anc if force == PRE else desc
            moved = set().union(*(reach[u] | {u} for u in host))
            pre, post = (moved, set()) if force == PRE else (set(), moved)
        stage = {i: PRE if i in pre else POST if i in post else DEVICE for i in compute}
        decisions = [FallbackOp(self.labels[u], self.nodes[u].op_type, f"onnx node #{u}", host[u], side[u],
                                len(anc[u]) if side[u] == PRE else len(desc[u])) for u in host]
        return stage, decisions

    def _reads(self, node: "onnx.NodeProto") -> List[str]:
        """Values ``node`` reads: its inputs and the outer-scope values its subgraphs (If/Loop/Scan) use."""
        names = [n for n in node.input if n]
        for a in node.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                local = {i.name for i in g.input} | {t.name for t in g.initializer}
                for sub in g.node:
                    names += [n for n in self._reads(sub) if n not in local]
                    local |= set(sub.output)
        return names

    def _cannot_cross(self, v: str) -> Optional[str]:
        """Why value ``v`` cannot be a device input or output (None when it can)."""
        shape, dtype = self.info.get(v, (None, None))
        if shape is None:
            return f"'{v}' has no static shape"
        if dtype is None or dtype not in _DEVICE_DTYPES:
            return f"'{v}' has element type {_elem_name(self.elem.get(v))}, which the device cannot hold"
        if 0 in shape:
            return f"'{v}' is empty (shape {list(shape)})"
        sample = self.samples_run.get(v)
        if (not dtype.is_floating_point and dtype != torch.bool and isinstance(sample, np.ndarray) and sample.size
                and sample.dtype.kind in "iu" and np.abs(sample.astype(np.float64)).max() > _EXACT_INT):
            return f"'{v}' holds integers beyond the device's exact range (+-{_EXACT_INT})"
        return None

    def _plan(self, stage: Mapping[int, str], pre_nodes, dev_nodes, post_nodes, consts, outputs, user_inputs):
        """Values crossing stage boundaries (the torch frontend's :func:`~pybuda.frontend.fallback.plan_stages`)."""
        producer = {o: i for i in stage for o in self.nodes[i].output if o}
        order = {n: k for k, n in enumerate(user_inputs)}
        for i in sorted(stage):
            for o in self.nodes[i].output:
                if o:
                    order.setdefault(o, len(order))

        def produced_before(st: str, v: str) -> bool:
            if v in consts or v in self.inits or v in self.bind or not v:
                return False
            if v in user_inputs:
                return True
            s = stage.get(producer.get(v, -1))
            return s is not None and (st == DEVICE and s == PRE or st == POST and s in (PRE, DEVICE))

        def needed_by(idx, st) -> Set[str]:
            return {v for i in idx for v in self._reads(self.nodes[i]) if produced_before(st, v)}

        finals = [o for o in outputs if o not in consts and o not in self.inits]
        if post_nodes:
            need = needed_by(post_nodes, POST) | {o for o in finals if stage.get(producer.get(o, -1)) != POST}
            dev_outputs = sorted(need, key=order.__getitem__)
        else:
            dev_outputs = list(outputs)
        if pre_nodes:
            need = needed_by(dev_nodes, DEVICE) | {o for o in dev_outputs if o in order and
                                                   stage.get(producer.get(o, -1)) != DEVICE}
            dev_inputs = sorted(need, key=order.__getitem__)
        else:
            dev_inputs = list(user_inputs)
        return dev_inputs, dev_outputs


#: Element types a device queue holds (integers and booleans as exact floats); float8 and the unsigned
#: 16/32/64-bit types (which torch widens) stay on the host.
_DEVICE_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
                            torch.int16, torch.int8, torch.uint8, torch.bool})

#: Largest integer magnitude the device's formats hold exactly (Float32's 24-bit significand).
_EXACT_INT = 2 ** 24


def _elem_name(elem_type: Optional[int]) -> str:
    if not elem_type:
        return "unknown"
    try:
        return onnx.TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return str(elem_type)
