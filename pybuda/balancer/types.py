"""Balancer results: one chosen :class:`OpModel` per op (grid, blocking, buffering, cost)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class OpModel:
    """How one op is laid out on cores.

    The op's output (t, rt, ct) in tiles is split as ``rt = grid_r * mblock_m * ublock_rt`` and
    ``ct = grid_c * mblock_n * ublock_ct``; ``t`` is the op's z times any t-streaming factor. Matmuls
    (and reduces) block their inner dimension as ``K = m_k * u_kt`` tiles.
    """

    grid_shape: Tuple[int, int]
    t: int
    mblock: Tuple[int, int]
    ublock: Tuple[int, int]
    ublock_order: str = "r"
    u_kt: int = 1
    m_k: int = 1
    buf_size_mb: int = 2
    t_stream_dir: str = "n"  # n | r | c | rz | cz
    t_stream_factor: Tuple[int, int] = (1, 1)
    prologue_inputs: Tuple[int, ...] = ()  # input indices whose parameters sit in L1 for the epoch
    l1_bytes: int = 0  # estimated L1 use per core
    cycles: int = 0  # estimated cycles per input (kernel vs bandwidth, whichever dominates)

    @property
    def cores(self) -> int:
        return self.grid_shape[0] * self.grid_shape[1]


@dataclass
class BalancerSolution:
    """The chosen op model of every op, and the policy that chose them."""

    policy: str
    op_models: Dict[str, OpModel] = field(default_factory=dict)
    target_cycles: Optional[int] = None

    def __getitem__(self, op_name: str) -> OpModel:
        return self.op_models[op_name]
