"""The netlist as Python objects: queues, graphs of placed ops, programs and fused ops.

This is the contract between the compiler and the backend (netlist_backend_spec §1). The compiler
builds a :class:`Netlist`, checks it with :func:`pybuda.netlist.validate` and writes it with
:func:`pybuda.netlist.to_yaml`; the golden and performance backends read one with
:func:`pybuda.netlist.parse_yaml` and walk ``netlist.programs``.

Conventions:

- Shapes are in tiles. A queue's or op's output tensor is ``(t, rt, ct)`` with
  ``rt = grid_r·mblock_m·ublock_rt`` and ``ct = grid_c·mblock_n·ublock_ct`` (:class:`TileShape3`).
- Pairs (``grid_size``, ``mblock`` …) are ``(rows, cols)`` tuples; lists given to a constructor are
  normalised to tuples so that two equal netlists compare equal.
- Optional fields are ``None`` when the YAML leaves them out; the emitter writes only what is set.
- Every class is keyword-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from pybuda.arch.tiles import DEFAULT_TILE_DIM, tile_size_bytes
from pybuda.netlist.device_ops import DEVICE_OPS, find_device_op, ops_of_class, ops_where
from pybuda.errors import NetlistError
# The TMs, input pad/unpad and TileShape3 live in pybuda.netlist.tms (the one TM module); the names stay
# importable from the model. ``apply_tms`` here is the *shape* function (tms.tms_shape).
from pybuda.netlist.tms import (  # noqa: F401
    TM, TM_TYPES, Broadcast, HSlice, HStack, InputPad, InputUnpad, Pad, TileBroadcast, TileShape3, TMError,
    Transpose, VSlice, VStack, as_tms, tms_shape,
)
from pybuda.netlist.tms import tms_shape as apply_tms  # noqa: F401
from pybuda.dtypes import DataFormat, MathFidelity

Pair = Tuple[int, int]
#: A program operand: an immediate integer or a ``$variable`` name.
Operand = Union[int, str]
#: A queue-setting flag: a bool or a ``$variable`` name.
Flag = Union[bool, str]

#: 32-byte header (rd/wr pointers) in front of every queue buffer (spec §1.2).
QUEUE_HEADER_BYTES = 32

# ---------------------------------------------------------------------------------------------------
# Op types (spec §3.1)
# ---------------------------------------------------------------------------------------------------

# Derived from the device-op table (pybuda.netlist.device_ops), which owns every per-type fact; the
# names stay here because the validator, the operand model and the balancer import them from the model.
MATMUL_OPS = ops_of_class("matmul")
DEPTHWISE_OPS = ops_of_class("depthwise")
BINARY_OPS = ops_of_class("binary")
COPY_OPS = ops_of_class("copy")
SFPU_OPS = ops_of_class("sfpu")
REDUCE_OPS = ops_of_class("reduce")
NARY_OPS = ops_of_class("splice")
FUSED_OPS = ops_of_class("fused")
OTHER_OPS = ops_of_class("other")
#: Every op ``type`` a netlist may use: the table's rows. ``drainer`` (needs a backend env flag) and
#: ``buffer`` (no kernel) are deliberately absent.
OP_TYPES = frozenset(DEVICE_OPS)
#: Ops that do not occupy Tensix cores (their grid may overlap others).
NON_TENSIX_OPS = frozenset(DEVICE_OPS) - ops_where("tensix")


def op_class(op_type: str) -> str:
    """Family of an op type: matmul, depthwise, binary, unary (copy or SFPU), reduce, splice, fused, other."""
    row = find_device_op(op_type)
    if row is None:
        return "other"
    return "unary" if row.is_unary else row.cls


def _pair(value: Any) -> Pair:
    a, b = value
    return (a, b)


def _opt_pair(value: Any) -> Optional[Pair]:
    return None if value is None else _pair(value)


def _tuple(value: Any) -> Optional[tuple]:
    return None if value is None else tuple(value)


def _tms(items: Any, where: str) -> Tuple[TM, ...]:
    # Accept TM objects or their YAML form ({"broadcast": {"r": 2}}, "transpose", {"hslice": 2}, ...),
    # so the compiler can hand over TM lists as plain data; errors name the key path under ``where``.
    try:
        return as_tms(tuple(items))
    except TMError as e:
        raise NetlistError(where + e.path, e.reason) from None


def _normal_attributes(attrs: Mapping[str, Any]) -> Dict[str, Any]:
    # Lists become tuples so a netlist built in Python equals its parsed YAML.
    return {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}


# ---------------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------------


def _blocked_shape(grid_size: Pair, t: int, mblock: Pair, ublock: Pair) -> TileShape3:
    return TileShape3(t, grid_size[0] * mblock[0] * ublock[0], grid_size[1] * mblock[1] * ublock[1])


# ---------------------------------------------------------------------------------------------------
# Queues (spec §1.2)
# ---------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class QueueDef:
    """An IO node: a FIFO (``type: queue``) or random-access (``ram``) buffer grid in DRAM or host memory.

    ``input`` is ``HOST`` or the producing op's name. ``dram``/``host`` hold one ``(channel, address)``
    per buffer, row-major over ``grid_size``.
    """

    name: str
    input: str
    type: str
    entries: int
    grid_size: Pair
    t: int
    mblock: Pair
    ublock: Pair
    df: DataFormat
    target_device: Union[int, Tuple[int, ...]]
    loc: str
    ublock_order: str = "r"
    dram: Optional[Tuple[Pair, ...]] = None
    host: Optional[Tuple[Pair, ...]] = None
    read_ports: Optional[Tuple[int, ...]] = None
    write_ports: Optional[Tuple[int, ...]] = None
    layout: Optional[str] = None
    alias: Optional[str] = None
    tile_dim: Optional[Pair] = None
    input_tms: Tuple[TM, ...] = ()

    def __post_init__(self) -> None:
        self.grid_size = _pair(self.grid_size)
        self.mblock = _pair(self.mblock)
        self.ublock = _pair(self.ublock)
        self.df = DataFormat.from_json(self.df)
        if not isinstance(self.target_device, int):
            self.target_device = tuple(self.target_device)
        self.dram = None if self.dram is None else tuple(_pair(a) for a in self.dram)
        self.host = None if self.host is None else tuple(_pair(a) for a in self.host)
        self.read_ports = _tuple(self.read_ports)
        self.write_ports = _tuple(self.write_ports)
        self.tile_dim = _opt_pair(self.tile_dim)
        self.input_tms = _tms(self.input_tms, f"queues.{self.name}.input_tms")

    @property
    def is_host_fed(self) -> bool:
        """True if the host (or a net2net transfer) writes this queue, not an op."""
        return self.input == "HOST" or "net2net" in self.input

    @property
    def shape(self) -> TileShape3:
        """(t, rt, ct) of one entry in tiles."""
        return _blocked_shape(self.grid_size, self.t, self.mblock, self.ublock)

    @property
    def buffers(self) -> int:
        """Number of buffers (grid r·c)."""
        return self.grid_size[0] * self.grid_size[1]

    @property
    def mblock_tiles(self) -> int:
        """Tiles in one macroblock of one buffer/core."""
        return self.mblock[0] * self.mblock[1] * self.ublock[0] * self.ublock[1]

    @property
    def effective_tile_dim(self) -> Pair:
        """tile_dim, or the default 32×32."""
        return self.tile_dim or DEFAULT_TILE_DIM

    def entry_size_bytes(self) -> int:
        """Bytes of one entry of one buffer: t · mblock tiles · tile size."""
        return self.t * self.mblock_tiles * tile_size_bytes(self.df, self.effective_tile_dim)

    def buffer_size_bytes(self) -> int:
        """DRAM/host footprint of one buffer: 32-byte header + entries · entry size."""
        return QUEUE_HEADER_BYTES + self.entries * self.entry_size_bytes()

    @property
    def allocations(self) -> Tuple[Pair, ...]:
        """The (channel, address) list of its location (dram or host)."""
        return (self.dram if self.loc == "dram" else self.host) or ()


# ---------------------------------------------------------------------------------------------------
# Ops and graphs (spec §1.3)
# ---------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class NetlistOp:
    """One placed op of a graph (named NetlistOp to keep it apart from the op registry's OpDef).

    ``input_tms``, ``input_pad`` and ``input_unpad`` are keyed by input index (``input_<N>_tms``).
    ``attributes`` keeps the type-specific attribute map (§3.2) with YAML scalar values.
    """

    name: str
    type: str
    grid_size: Pair
    inputs: Tuple[str, ...]
    in_df: Tuple[DataFormat, ...]
    out_df: DataFormat
    intermed_df: DataFormat
    acc_df: DataFormat
    math_fidelity: MathFidelity
    t: int
    mblock: Pair
    ublock: Pair
    buf_size_mb: int
    grid_loc: Optional[Pair] = None
    grid_transpose: bool = False
    ublock_order: str = "r"
    tile_dim: Optional[Pair] = None
    input_buf_min_size_tiles: Optional[Tuple[int, ...]] = None
    input_dram_io_buf_size_tiles: Optional[Tuple[int, ...]] = None
    overlay_size: Optional[int] = None
    untilize_output: bool = False
    gradient_op: bool = False
    forked_dram_inputs: Tuple[Tuple[str, str], ...] = ()
    input_tms: Dict[int, Tuple[TM, ...]] = field(default_factory=dict)
    input_pad: Dict[int, InputPad] = field(default_factory=dict)
    input_unpad: Dict[int, InputUnpad] = field(default_factory=dict)
    attributes: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.grid_size = _pair(self.grid_size)
        self.grid_loc = _opt_pair(self.grid_loc)
        self.mblock = _pair(self.mblock)
        self.ublock = _pair(self.ublock)
        self.tile_dim = _opt_pair(self.tile_dim)
        self.inputs = tuple(self.inputs)
        self.in_df = tuple(DataFormat.from_json(d) for d in self.in_df)
        self.out_df = DataFormat.from_json(self.out_df)
        self.intermed_df = DataFormat.from_json(self.intermed_df)
        self.acc_df = DataFormat.from_json(self.acc_df)
        self.math_fidelity = MathFidelity.from_json(self.math_fidelity)
        self.input_buf_min_size_tiles = _tuple(self.input_buf_min_size_tiles)
        self.input_dram_io_buf_size_tiles = _tuple(self.input_dram_io_buf_size_tiles)
        self.forked_dram_inputs = tuple(_pair(p) for p in self.forked_dram_inputs)
        self.input_tms = {int(k): _tms(v, f"{self.name}.input_{k}_tms") for k, v in self.input_tms.items()}
        self.input_pad = {int(k): v for k, v in self.input_pad.items()}
        self.input_unpad = {int(k): v for k, v in self.input_unpad.items()}
        self.attributes = _normal_attributes(self.attributes)

    @property
    def shape(self) -> TileShape3:
        """(t, rt, ct) of the op's output in tiles."""
        return _blocked_shape(self.grid_size, self.t, self.mblock, self.ublock)

    @property
    def op_class(self) -> str:
        """Family of the op type (see :func:`op_class`)."""
        return op_class(self.type)

    @property
    def ublock_tiles(self) -> int:
        """Tiles in one ublock (rt·ct)."""
        return self.ublock[0] * self.ublock[1]

    @property
    def mblock_tiles(self) -> int:
        """Tiles in one macroblock of one buffer/core."""
        return self.mblock[0] * self.mblock[1] * self.ublock_tiles

    @property
    def effective_tile_dim(self) -> Pair:
        """tile_dim, or the default 32×32."""
        return self.tile_dim or DEFAULT_TILE_DIM

    @property
    def footprint(self) -> Pair:
        """(rows, cols) of cores it occupies: grid_size, swapped when grid_transpose is set."""
        r, c = self.grid_size
        return (c, r) if self.grid_transpose else (r, c)

    def cores(self) -> List[Pair]:
        """Logical (row, col) of every core it occupies; core (r, c) of the op grid sits at
        grid_loc + (c, r) under grid_transpose."""
        if self.grid_loc is None:
            return []
        r0, c0 = self.grid_loc
        rows, cols = self.footprint
        return [(r0 + r, c0 + c) for r in range(rows) for c in range(cols)]

    def attr(self, key: str, default: Any = None) -> Any:
        """An attribute value, or ``default``."""
        return self.attributes.get(key, default)

    @property
    def m_k(self) -> int:
        """Outer K blocks (attribute ``m_k``, 1 if unset)."""
        return int(self.attributes.get("m_k", 1))

    @property
    def u_kt(self) -> int:
        """K tiles per inner block (attribute ``u_kt``, 1 if unset)."""
        return int(self.attributes.get("u_kt", 1))

    @property
    def is_accumulating(self) -> bool:
        """gradient_op, or a matmul with m_k > 1 or a bias (spec §1.3): it spills partials to intermed."""
        return self.gradient_op or (self.type in MATMUL_OPS and (self.m_k > 1 or bool(self.attr("bias"))))

    def tms_of(self, index: int) -> Tuple[TM, ...]:
        """The TMs of input ``index`` (empty if none)."""
        return self.input_tms.get(index, ())


@dataclass(kw_only=True)
class GraphDef:
    """One graph = one epoch on ``target_device``; ``execute`` runs it over ``input_count`` inputs."""

    name: str
    target_device: Union[int, Tuple[int, ...]]
    input_count: int
    ops: Dict[str, NetlistOp] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.target_device, int):
            self.target_device = tuple(self.target_device)
        self.ops = dict(self.ops)


# ---------------------------------------------------------------------------------------------------
# Programs (spec §1.5)
# ---------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class QueueSetting:
    """Per-queue settings of one ``execute``. Unset fields are ``None``; see :meth:`autoincs` for the
    defaults the backend derives."""

    prologue: Optional[Flag] = None
    epilogue: Optional[Flag] = None
    zero: Optional[Flag] = None
    rd_ptr_local: Optional[Operand] = None
    rd_ptr_global: Optional[Operand] = None
    wr_ptr_global: Optional[Operand] = None
    rd_ptr_autoinc: Optional[Operand] = None
    global_rdptr_autoinc: Optional[Operand] = None
    global_wrptr_autoinc: Optional[Operand] = None
    read_only: Optional[Flag] = None

    def autoincs(self, queue_type: str) -> Tuple[Operand, Operand, Operand]:
        """(rd_ptr_autoinc, global_rdptr_autoinc, global_wrptr_autoinc) with the backend defaults filled in:
        ``queue`` 1/0/1, ``ram`` 0/0/0 (derive_complex_settings)."""
        d = (1, 0, 1) if queue_type == "queue" else (0, 0, 0)
        vals = (self.rd_ptr_autoinc, self.global_rdptr_autoinc, self.global_wrptr_autoinc)
        return tuple(d[i] if v is None else v for i, v in enumerate(vals))  # type: ignore[return-value]


@dataclass(kw_only=True)
class Param:
    """``param: [$p_a, …]`` — values supplied by run_program; must be the first instruction."""

    names: Tuple[str, ...]

    def __post_init__(self) -> None:
        self.names = tuple(self.names)


@dataclass(kw_only=True)
class Var:
    """``var: {$a: 0, …}`` (or the list form, all 0) — local to one call of the program."""

    values: Dict[str, int]
    as_list: bool = False


@dataclass(kw_only=True)
class StaticVar:
    """``staticvar: {$a: 0, …}`` — persists across calls; initialised on first sight only."""

    values: Dict[str, int]
    as_list: bool = False


#: varinst opcodes and their argument counts after ``$out, op``.
VARINST_ARITY: Dict[str, int] = {"set": 1, "add": 2, "mul": 2, "inc": 1, "incwrap": 2}


@dataclass(kw_only=True)
class VarInst:
    """``varinst: [$out, op, args…]`` — set (out=a), add (out=a+b), mul (out=a·b), inc (out+=a),
    incwrap (out=(out+a) mod b)."""

    out: str
    op: str
    args: Tuple[Operand, ...]

    def __post_init__(self) -> None:
        self.args = tuple(self.args)


@dataclass(kw_only=True)
class Loop:
    """``loop: $count`` — run the body up to the matching endloop ``count`` times (count >= 1)."""

    count: Operand


@dataclass(kw_only=True)
class EndLoop:
    """``endloop`` — close the innermost loop."""


@dataclass(kw_only=True)
class Execute:
    """``execute: {graph_name, queue_settings}`` — run one epoch of a graph over its input_count inputs."""

    graph_name: str
    queue_settings: Dict[str, QueueSetting] = field(default_factory=dict)


@dataclass(kw_only=True)
class AllocateQueue:
    """``allocate_queue: [q, …]`` — start of the queues' lifetime."""

    names: Tuple[str, ...]

    def __post_init__(self) -> None:
        self.names = tuple(self.names)


@dataclass(kw_only=True)
class DeallocateQueue:
    """``deallocate_queue: [q, …]`` — end of the queues' lifetime."""

    names: Tuple[str, ...]

    def __post_init__(self) -> None:
        self.names = tuple(self.names)


Instruction = Union[Param, Var, StaticVar, VarInst, Loop, EndLoop, Execute, AllocateQueue, DeallocateQueue]


@dataclass(kw_only=True)
class Program:
    """A named instruction list; the backend appends an implicit ``endprogram``."""

    name: str
    instructions: List[Instruction] = field(default_factory=list)


def resolve_operand(value: Union[Operand, bool], env: Mapping[str, int]) -> int:
    """Value of a program operand: an int, a bool, ``true``/``false``, or ``$name`` looked up in ``env``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if value in ("true", "false"):
        return int(value == "true")
    return env[value]


# ---------------------------------------------------------------------------------------------------
# Fused ops (spec §1.4)
# ---------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class FusedSubOp:
    """One scheduled op inside a fused op. Inputs name ``inputK``, ``intermedK`` or ``dest``; ``output``
    is ``intermedK``, ``dest`` or ``output``. t and ublock_order come from the parent op."""

    name: str
    type: str
    inputs: Tuple[str, ...]
    output: str
    mblock: Pair
    ublock: Pair
    input_tms: Dict[int, Tuple[TM, ...]] = field(default_factory=dict)
    pop: Tuple[str, ...] = ()
    pop_last: Tuple[str, ...] = ()
    zero_point: Optional[float] = None
    attributes: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.inputs = tuple(self.inputs)
        self.mblock = _pair(self.mblock)
        self.ublock = _pair(self.ublock)
        self.input_tms = {int(k): _tms(v, f"{self.name}.input_{k}_tms") for k, v in self.input_tms.items()}
        self.pop = tuple(self.pop)
        self.pop_last = tuple(self.pop_last)
        self.attributes = _normal_attributes(self.attributes)


def fused_spec(op: Any, fused_ops: Optional[Mapping[Any, Any]]) -> Optional[dict]:
    """The schedule dict (``{inputs, intermediates, schedules}``) of fused op ``op``, a lowered-graph op:
    ``fused_ops[fused_op_id]`` (the table may key the id as int or str), else the ``fused_op`` attribute or
    tag the op carries inline; None when it has none."""
    fid = op.attrs.get("fused_op_id")
    table = fused_ops or {}
    if fid is not None:
        for key in (fid, str(fid), int(fid) if str(fid).isdigit() else None):
            if key is not None and key in table:
                return table[key]
    return op.attrs.get("fused_op") or getattr(op, "tags", {}).get("fused_op")


def fused_sub_ops(spec: Optional[dict]) -> List[dict]:
    """The scheduled ops of a fused-op schedule dict, in schedule order."""
    return [sub for schedule in (spec or {}).get("schedules", []) or [] for entry in schedule
            for sub in entry.values()]


@dataclass(kw_only=True)
class FusedOpDef:
    """``fused_ops: {id: {inputs, intermediates, schedules}}``."""

    id: int
    inputs: int
    intermediates: int
    schedules: List[List[FusedSubOp]] = field(default_factory=list)
    custom_kernel_path: Optional[str] = None


# ---------------------------------------------------------------------------------------------------
# The netlist
# ---------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Netlist:
    """A whole netlist. ``devices_arch`` is the ``devices.arch`` value as written (one name, or a tuple
    of names of which ``selected_arch`` picks one); :attr:`arch` gives the resolved name."""

    devices_arch: Union[str, Tuple[str, ...]]
    queues: Dict[str, QueueDef] = field(default_factory=dict)
    graphs: Dict[str, GraphDef] = field(default_factory=dict)
    programs: List[Program] = field(default_factory=list)
    fused_ops: Dict[int, FusedOpDef] = field(default_factory=dict)
    selected_arch: Optional[str] = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.devices_arch, str):
            self.devices_arch = self.devices_arch.lower()
        else:
            self.devices_arch = tuple(a.lower() for a in self.devices_arch)
        if self.selected_arch is not None:
            self.selected_arch = self.selected_arch.lower()

    @property
    def arch(self) -> Optional[str]:
        """The arch this netlist targets, or None if ``devices_arch`` is a list and none was selected."""
        if self.selected_arch is not None:
            return self.selected_arch
        return self.devices_arch if isinstance(self.devices_arch, str) else None

    # -- lookups -------------------------------------------------------------------------------
    def iter_ops(self) -> Iterator[Tuple[GraphDef, NetlistOp]]:
        """Every (graph, op) in graph order, then op order."""
        for graph in self.graphs.values():
            for op in graph.ops.values():
                yield graph, op

    def find_op(self, name: str) -> Optional[Tuple[GraphDef, NetlistOp]]:
        """The (graph, op) with this name, or None."""
        for graph in self.graphs.values():
            if name in graph.ops:
                return graph, graph.ops[name]
        return None

    def program(self, name: str) -> Program:
        """The program with this name (KeyError if none)."""
        for prog in self.programs:
            if prog.name == name:
                return prog
        raise KeyError(name)

    def shape_of(self, name: str) -> TileShape3:
        """Output (t, rt, ct) of a queue or op, by name (KeyError if neither)."""
        if name in self.queues:
            return self.queues[name].shape
        found = self.find_op(name)
        if found is None:
            raise KeyError(name)
        return found[1].shape

    def df_of(self, name: str) -> DataFormat:
        """Data format a reader of ``name`` sees: the queue's df or the op's out_df."""
        if name in self.queues:
            return self.queues[name].df
        found = self.find_op(name)
        if found is None:
            raise KeyError(name)
        return found[1].out_df

    def queues_fed_by(self, op_name: str) -> List[QueueDef]:
        """Queues whose ``input`` is this op."""
        return [q for q in self.queues.values() if q.input == op_name]

    def readers_of(self, name: str) -> List[Tuple[GraphDef, NetlistOp, int]]:
        """Every (graph, op, input index) that reads ``name``."""
        return [(g, op, i) for g, op in self.iter_ops() for i, inp in enumerate(op.inputs) if inp == name]

    def graph_io(self, graph_name: str) -> Tuple[List[str], List[str]]:
        """(queues the graph reads, queues the graph's ops write), each in first-seen order."""
        graph = self.graphs[graph_name]
        reads: List[str] = []
        for op in graph.ops.values():
            for inp in op.inputs:
                if inp in self.queues and inp not in reads:
                    reads.append(inp)
        writes = [q.name for q in self.queues.values() if q.input in graph.ops]
        return reads, writes
