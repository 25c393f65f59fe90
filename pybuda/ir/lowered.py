"""The lowered ("Buda") graph: backend ops on 32x32 tiles, the contract between lowering, the
balancer/placer and the netlist emitter.

Shapes here are tile shapes of the *device* tensor: ``TileShape(w, z, rt, ct)`` where ``z`` is the
op's ``t`` before any t-streaming and rows/cols are in tiles (padded to multiples of 32 datums).
``BudaOp.type`` is a netlist op type (``matmul``, ``add``, ``nop``, ``reduce``, ``splice``, ``exp``,
``fused_op`` ...). Queues hold everything that crosses the host or lives in DRAM: activations pushed
by the user, outputs, parameters and constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from pybuda.dtypes import DataFormat, MathFidelity


@dataclass(frozen=True)
class TileShape:
    """A device tensor shape in tiles: w (batch-like), z (slices, the op's t), rt, ct."""

    w: int
    z: int
    rt: int
    ct: int

    @property
    def tiles(self) -> int:
        """Number of tiles."""
        return self.w * self.z * self.rt * self.ct

    def as_tuple(self) -> Tuple[int, int, int, int]:
        """(w, z, rt, ct)."""
        return (self.w, self.z, self.rt, self.ct)


@dataclass
class BudaQueue:
    """A DRAM/host queue: graph inputs, outputs, parameters, constants (and, after placement,
    epoch-to-epoch buffers)."""

    name: str
    kind: str  # "input" | "output" | "parameter" | "constant" | "epoch_to_epoch" | "accumulator"
    shape: TileShape
    df: DataFormat = DataFormat.Float16_b
    producer: Optional[str] = None  # op name for output / epoch_to_epoch queues, None = HOST
    original_shape: Tuple[int, ...] = ()  # framework shape before padding to tiles
    requires_grad: bool = False
    tags: Dict[str, Any] = field(default_factory=dict)


@dataclass
class BudaOp:
    """One backend op with its tile shapes, formats and the TMs applied on each input edge."""

    name: str
    type: str
    inputs: List[str]  # names of BudaOps or BudaQueues
    shape: TileShape  # output shape in tiles
    attrs: Dict[str, Any] = field(default_factory=dict)  # netlist attributes (m_k/u_kt set by the balancer)
    input_tms: Dict[int, List[Any]] = field(default_factory=dict)  # netlist TM list per input index
    in_df: List[DataFormat] = field(default_factory=list)
    out_df: DataFormat = DataFormat.Float16_b
    intermed_df: DataFormat = DataFormat.Float16_b
    acc_df: DataFormat = DataFormat.Float16_b
    math_fidelity: MathFidelity = MathFidelity.HiFi3
    gradient_op: bool = False
    untilize_output: bool = False
    epoch_type: str = "fwd"  # fwd | bwd | opt
    tags: Dict[str, Any] = field(default_factory=dict)  # e.g. source graph node, fused op id

    def input_shape(self, graph: "BudaGraph", index: int) -> TileShape:
        """Shape of input ``index`` as produced (before this op's input TMs)."""
        return graph.shape_of(self.inputs[index])


@dataclass
class BudaGraph:
    """Lowered graph: ops in a valid schedule order plus the queues they read and write."""

    name: str
    ops: Dict[str, BudaOp] = field(default_factory=dict)
    queues: Dict[str, BudaQueue] = field(default_factory=dict)
    microbatch: int = 1
    fused_ops: Dict[int, Dict[str, Any]] = field(default_factory=dict)  # netlist fused_ops section
    input_order: List[str] = field(default_factory=list)  # input queue names in module-input order
    output_order: List[str] = field(default_factory=list)  # output queue names in module-output order
    # Values of parameter and constant queues, each of shape ``queue.original_shape`` (framework layout,
    # unpadded); :func:`pybuda.netlist.host_io.to_device_layout` turns one into queue data.
    tensors: Dict[str, torch.Tensor] = field(default_factory=dict)

    def add_op(self, op: BudaOp) -> BudaOp:
        """Append an op (names are unique across ops and queues)."""
        if op.name in self.ops or op.name in self.queues:
            raise ValueError(f"lowered graph '{self.name}' already has '{op.name}'")
        self.ops[op.name] = op
        return op

    def insert_before(self, op: BudaOp, before: str) -> BudaOp:
        """Add ``op`` to the schedule just before op ``before`` (the ops dict's order is the schedule)."""
        if op.name in self.ops or op.name in self.queues:
            raise ValueError(f"lowered graph '{self.name}' already has '{op.name}'")
        items = list(self.ops.items())
        self.ops.clear()
        for name, existing in items:
            if name == before:
                self.ops[op.name] = op
            self.ops[name] = existing
        return op

    def add_queue(self, queue: BudaQueue) -> BudaQueue:
        """Add a queue (names are unique across ops and queues)."""
        if queue.name in self.ops or queue.name in self.queues:
            raise ValueError(f"lowered graph '{self.name}' already has '{queue.name}'")
        self.queues[queue.name] = queue
        return queue

    def shape_of(self, name: str) -> TileShape:
        """Output shape of an op or queue."""
        if name in self.ops:
            return self.ops[name].shape
        return self.queues[name].shape

    def df_of(self, name: str) -> DataFormat:
        """Data format a reader of ``name`` sees: the op's out_df or the queue's df."""
        if name in self.ops:
            return self.ops[name].out_df
        return self.queues[name].df

    def consumers(self, name: str) -> List[str]:
        """Ops (and output queues) that read ``name``."""
        users = [o.name for o in self.ops.values() if name in o.inputs]
        users += [q.name for q in self.queues.values() if q.producer == name]
        return users

    def reader_map(self) -> Dict[str, List[str]]:
        """Every name's readers (ops and output queues) in one pass; use it where many are asked for."""
        out: Dict[str, List[str]] = {}
        for op in self.ops.values():
            for name in op.inputs:
                out.setdefault(name, []).append(op.name)
        for q in self.queues.values():
            if q.producer is not None:
                out.setdefault(q.producer, []).append(q.name)
        return out

    def __iter__(self) -> Iterator[BudaOp]:
        return iter(list(self.ops.values()))

