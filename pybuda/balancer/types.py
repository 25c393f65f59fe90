"""Balancer results: one chosen :class:`OpModel` per op (grid, blocking, buffering, cost)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class OpModel:
    """How one op is laid out on cores.

    The op's output (t, rt, ct) in tiles is split as ``rt = grid_r * mblock_m * ublock_rt`` and
    ``ct = grid_c * mblock_n * ublock_ct``; ``t`` is the op's z times any t-streaming factor. Matmuls
    (and reduces) block their inner dimension as ``K = m_k * u_kt`` tiles.

    T-streaming: ``t_stream_dir`` ``r`` (or ``rz``) slices the output rows into ``t_stream_factor[0]``
    t-slices, ``c`` (or ``cz``) the columns into ``t_stream_factor[1]``; so with factors (fr, fc) the
    op computes ``t = z·fr·fc`` slices of ``(rt/fr, ct/fc)`` tiles. The netlist emitter undoes a
    producer's streaming with ``vstack``/``hstack`` and applies the consumer's with ``vslice``/``hslice``
    (see :func:`pybuda.balancer.edges.stream_edge_tms`).

    Padding: when no grid divides an awkward tile count (a prime number of columns, say) and the whole
    tensor does not fit one core's L1, the op computes a larger tensor: ``padding`` (rows, cols) tiles
    are added at the end of its output, so ``out_rt``/``out_ct`` are the padded sizes. Operand ``i`` is
    padded by ``input_padding[i]`` tiles (a ``pad`` TM on its edge); readers drop the padding again
    (:func:`pybuda.balancer.edges.edge_unpad`, the netlist's ``input_N_unpad``) and host output
    queues crop it. The padded tiles only ever meet other padded tiles, never a contraction.
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
    kernel_cycles: int = 0  # the kernel (math) part of ``cycles``, perf/cost.py
    dram_inputs: Tuple[int, ...] = ()  # parameter/constant inputs streamed from DRAM every input
    dram_bytes: float = 0.0  # bytes per input over the DRAM channels (cost.dram_bytes_per_input)
    #: per operand, the input buffer in tiles when override_input_buffer_multiplier sized it (0: default); the
    #: netlist op's ``input_buf_min_size_tiles``. Empty when no operand is overridden.
    input_buf_min_size_tiles: Tuple[int, ...] = ()
    padding: Tuple[int, int] = (0, 0)  # output tile rows/cols added past the op's shape (see above)
    input_padding: Tuple[Tuple[int, int], ...] = ()  # per operand: (rows, cols) tiles padded on its edge

    @property
    def cores(self) -> int:
        return self.grid_shape[0] * self.grid_shape[1]

    @property
    def out_rt(self) -> int:
        """Output tile rows per t-slice (after t-streaming)."""
        return self.grid_shape[0] * self.mblock[0] * self.ublock[0]

    @property
    def out_ct(self) -> int:
        """Output tile columns per t-slice (after t-streaming)."""
        return self.grid_shape[1] * self.mblock[1] * self.ublock[1]

    @property
    def mblock_tiles(self) -> int:
        """Tiles of one output macro-block (one core, one t-slice)."""
        return self.mblock[0] * self.mblock[1] * self.ublock[0] * self.ublock[1]

    @property
    def padded(self) -> bool:
        """Whether the op computes a padded tensor (see the class docstring)."""
        return self.padding != (0, 0)

    @property
    def stream_factor(self) -> int:
        """The t-streaming factor (1 when not streaming)."""
        return self.t_stream_factor[0] * self.t_stream_factor[1]


@dataclass
class BalancerSolution:
    """The chosen op model of every op, and the policy that chose them.

    ``epoch_breaks`` lists ops the policy wants to start a new epoch at (Ribbon commits epochs,
    SingleOpPerEpoch breaks at every op); the placer honours them along with the user's breaks.
    ``target_cycles`` is the global per-op cycle target of NLP/Ribbon; ``legal_counts`` the number of
    legal op models each op had.
    """

    policy: str
    op_models: Dict[str, OpModel] = field(default_factory=dict)
    target_cycles: Optional[int] = None
    epoch_breaks: List[str] = field(default_factory=list)
    legal_counts: Dict[str, int] = field(default_factory=dict)

    def __getitem__(self, op_name: str) -> OpModel:
        return self.op_models[op_name]

    def __contains__(self, op_name: str) -> bool:
        return op_name in self.op_models
