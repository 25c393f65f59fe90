"""Legal op models: enumerating every (t-streaming, grid) layout of an op that the netlist and the chip accept.

For each op the legalizer derives its facts (:class:`OpFacts`) and enumerates

* **t-streaming** options: none, or a factor ``f`` dividing the output's tile rows (``r``) or columns
  (``c``) when ``enable_t_streaming`` is set (or an override asks for it) and the op type can stream;
* **grids** ``(gr, gc)`` with ``gr | rt/fr``, ``gc | ct/fc`` that fit the harvested worker grid (or fit
  it transposed when auto-transposing placement is enabled);
* per grid one **blocking** that passes the **L1 check**: ublock, ``u_kt``, ``buf_size_mb`` and prologue
  parameters sized against the L1 budget by :mod:`pybuda.balancer.l1fit` (:class:`~pybuda.balancer.l1fit.L1Fit`,
  which :class:`Legalizer` mixes in);
* the **cost** from :mod:`pybuda.perf.cost`;
* when none of the above fits (an awkward tile count: a prime number of tiles no grid divides, too
  large for one core), or when every exact layout leaves at least 3/4 of the grid idle (Whisper's 47-tile
  attention would run on one core; not under Ribbon, which reproduces TT-Buda), **padded** layouts
  (``OpModel.padding``): a dimension the op neither contracts nor reduces is rounded up to a multiple of
  each grid side (beside exact layouts, only by at most 1/8 more tiles); its operands get a ``pad`` TM
  and its readers drop the padding (host outputs crop it; ops read it through ``input_N_unpad``, see
  :func:`pybuda.balancer.edges.edge_unpad`). Not enough: a single tile row longer than a grid row of cores can hold, which
  only t-streaming splits (ops writing queues do not stream).

Results are cached by an op *signature* (type, shapes, formats, attributes, TMs, input kinds,
overrides), so the ~24 identical layers of a transformer are legalised once.

Overrides (``CompilerConfig.balancer_op_overrides``): ``grid_shape``, ``t_stream_dir``,
``t_stream_shape``, ``u_kt``, ``force_dram_parameters``, ``input_buffer_multiplier`` and
``output_buffer_multiplier``. An override that cannot be honoured raises
:class:`~pybuda.errors.CompileError` naming the op and the reason.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

from pybuda.perf import cost, sparse
from pybuda.balancer.blocking import divisors, padded_sides
from pybuda.balancer.edges import MATMUL_TYPES as _MATMUL
from pybuda.balancer.l1fit import _PARAM_KINDS, L1Fit, _Diag
from pybuda.balancer.types import OpModel
from pybuda.netlist.model import fused_spec, fused_sub_ops
from pybuda.errors import CompileError
from pybuda.ir.graph import WRITTEN_IN_PLACE
from pybuda.netlist.tms import HStack, VStack, as_tms, tms_shape
from pybuda.netlist.device_ops import ops_of_class
from pybuda.dtypes import DataFormat

log = logging.getLogger(__name__)

STAGE = "BALANCER_PASS"

_NO_STREAM_TYPES = frozenset({"splice", "embedding", "tilizer", "topk", "ethernet_datacopy", "drainer", "buffer"})
#: Padded layouts are also offered when the exact ones use at most 1/NARROW_FRACTION of the worker grid ...
NARROW_FRACTION = 4
#: ... and then only paddings that add at most 1/PAD_WASTE of the op's tiles.
PAD_WASTE = 8
#: Op types that may compute a padded tensor (see OpModel): the padded tiles of their operands only reach
#: padded output tiles. Not: depthwise (its weights are laid out per output column), dropout (its random
#: pattern follows the tensor's shape), splice/embedding/tilizer/topk and the other data-movement ops.
_PADDABLE = (ops_of_class("binary", "copy", "sfpu", "reduce", "fused") | frozenset({"matmul"})) - \
    frozenset({"dropout", "ethernet_datacopy"})


# --------------------------------------------------------------------------------------------------
# Per-op facts
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OpFacts:
    """What the legalizer needs to know about an op, derived once from the graph (hashable)."""

    type: str
    z: int
    rt: int
    ct: int
    k: int  # matmul inner dim / reduced dim of an r|c reduce, in tiles; 1 otherwise
    reduce_dim: str  # r | c | z | ""
    in_kinds: Tuple[str, ...]  # "op" or the queue kind (input, parameter, constant, ...)
    in_raw: Tuple[Tuple[int, int], ...]  # (z, tiles) of each input as stored
    in_dfs: Tuple[DataFormat, ...]
    out_df: DataFormat
    intermed_df: DataFormat
    acc_df: DataFormat
    has_bias: bool
    gradient_op: bool
    stream_dirs: FrozenSet[str]
    grid_limits: Tuple[int, int]  # extra limits on (grid_r, grid_c) from fused reduces; 0 = none
    output_dest: str  # "op" | "dram" | "host"
    fused_intermediates: int
    fused_max_m_k: int
    bias_attr: bool  # the netlist ``bias`` attribute (pins the bias operand's stack block)
    stacked_inputs: Tuple[Tuple[int, Tuple[int, int, int], Tuple[Any, ...]], ...]  # (index, shape, tms) with stacks
    sparse: bool = False  # identity (sparse) matmul: in0 = unique sparse tiles, in2 = the index
    pad_dims: Tuple[bool, bool] = (False, False)  # whether the output's rows / columns may be padded
    untilize: bool = False  # writes an untilized (row-major) output queue

    @property
    def n_inputs(self) -> int:
        return len(self.in_kinds)


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return tuple(sorted(repr(v) for v in value))
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


# --------------------------------------------------------------------------------------------------
# The legalizer
# --------------------------------------------------------------------------------------------------

class Legalizer(L1Fit):
    """Enumerates and caches legal op models for the ops of one lowered graph on one device."""

    def __init__(self, graph: Any, device: Any, config: Any):
        self.graph = graph
        self.device = device
        self.config = config
        self.rows, self.cols = device.grid_rows, device.grid_cols
        self.budget = int(device.l1_pybuda_budget_bytes)
        self.bandwidth = cost.device_bandwidth(device)
        self.allow_transpose = bool(getattr(config, "enable_auto_transposing_placement", False))
        from pybuda.balancer.policies import normalize_policy

        # TT-Buda's balancer priced a standalone op as exact even in approximate mode (its op-model
        # description set approx_mode for fused ops only): Ribbon, which reproduces its placements, does too.
        self.prices_approximate_mode = normalize_policy(getattr(config, "balancer_policy", None)) != "Ribbon"
        # TT-Buda padded an op only when no layout fitted; Ribbon, which reproduces its placements, does too.
        self.pads_narrow_ops = self.prices_approximate_mode
        self._cache: Dict[Any, List[OpModel]] = {}
        self._facts: Dict[str, OpFacts] = {}
        self._output_queues: Dict[str, List[Any]] = {}
        self._read_by_ops = {name for o in graph.ops.values() for name in o.inputs}
        for q in graph.queues.values():
            if q.producer is not None:
                self._output_queues.setdefault(q.producer, []).append(q)

    # -- facts -------------------------------------------------------------------------------------
    def facts(self, op: Any) -> OpFacts:
        """Derived facts of ``op`` (cached per op name)."""
        hit = self._facts.get(op.name)
        if hit is None:
            hit = self._facts[op.name] = self._make_facts(op)
        return hit

    def _make_facts(self, op: Any) -> OpFacts:
        g = self.graph
        shape = op.shape
        in_shapes: List[Tuple[int, int, int]] = []
        kinds: List[str] = []
        raw: List[Tuple[int, int]] = []
        for i, name in enumerate(op.inputs):
            if name in g.ops:
                kinds.append("op")
            elif name in g.queues:
                kinds.append(str(g.queues[name].kind))
            else:
                raise CompileError(f"input {i} '{name}' is neither an op nor a queue of the lowered graph",
                                   stage=STAGE, op=op.name)
            s = g.shape_of(name)
            raw.append((s.z, s.tiles))
            try:
                in_shapes.append(tms_shape((s.z, s.rt, s.ct), op.input_tms.get(i, ())))
            except ValueError as e:
                raise CompileError(f"input {i} '{name}': {e}", stage=STAGE, op=op.name) from None
        k, reduce_dim = 1, ""
        if op.type in _MATMUL and op.attrs.get("identity") and len(in_shapes) > 1:
            k = in_shapes[1][1]  # sparse matmul: in0 is the sparse picker, K blocks in1's rows
        elif op.type in _MATMUL and in_shapes:
            k = in_shapes[0][2]
            if len(in_shapes) > 1 and in_shapes[1][1] != k:
                raise CompileError(f"matmul inner dimensions differ: input 0 has {k} tile columns, input 1 has "
                                   f"{in_shapes[1][1]} tile rows (after TMs)", stage=STAGE, op=op.name)
        elif op.type == "reduce" and in_shapes:
            reduce_dim = str(op.attrs.get("dim", "r")).lower()
            k = in_shapes[0][1] if reduce_dim == "r" else in_shapes[0][2] if reduce_dim == "c" else 1
        in_dfs = tuple(op.in_df) if len(op.in_df) == len(op.inputs) else tuple(g.df_of(n) for n in op.inputs)
        has_bias = op.type in _MATMUL and (bool(op.attrs.get("bias")) or
                                           (len(op.inputs) >= 3 and not op.attrs.get("identity")))
        outs = self._output_queues.get(op.name, [])
        cfg = self.config
        output_dest = "op"
        if outs:
            output_dest = "host" if getattr(cfg, "output_queues_on_host", True) and any(
                q.kind == "output" for q in outs) else "dram"
        # Fused ops: reduces and matmuls inside need the contracted dimension on one core.
        spec = fused_spec(op, getattr(g, "fused_ops", None)) if op.type == "fused_op" else None
        subs = fused_sub_ops(spec)
        limit_r = limit_c = 0
        max_mk = 1
        for sub in subs:
            stype = str(sub.get("type", ""))
            sattrs = sub.get("attributes", {}) or {}
            if stype == "reduce":
                dim = str(sattrs.get("dim", sub.get("dim", "c"))).lower()
                if dim == "r":
                    limit_r = 1
                elif dim == "c":
                    limit_c = 1
            elif stype in _MATMUL:
                limit_c = 1
                max_mk = max(max_mk, int(sattrs.get("m_k", sub.get("m_k", 1)) or 1))
        dirs = self._stream_dirs(op, shape.z, reduce_dim, bool(outs), limit_r, limit_c)
        stacked = []
        for i, name in enumerate(op.inputs):
            tms = as_tms(op.input_tms.get(i, ()))  # TM objects: hashable, as OpFacts must be
            if any(isinstance(tm, (HStack, VStack)) for tm in tms):
                s_in = g.shape_of(name)
                stacked.append((i, (s_in.z, s_in.rt, s_in.ct), tms))
        sparse = op.type in _MATMUL and bool(op.attrs.get("identity"))
        in_place = any(q.tags.get(WRITTEN_IN_PLACE) for q in outs)  # the ram it aliases has the exact shape
        pad_dims = (False, False) if in_place else self._pad_dims(op, (shape.z, shape.rt, shape.ct), in_shapes,
                                                                  reduce_dim, sparse, (limit_r, limit_c))
        return OpFacts(
            type=op.type, z=shape.z, rt=shape.rt, ct=shape.ct, k=k, reduce_dim=reduce_dim, in_kinds=tuple(kinds),
            in_raw=tuple(raw), in_dfs=in_dfs, out_df=op.out_df, intermed_df=op.intermed_df, acc_df=op.acc_df,
            has_bias=has_bias, gradient_op=bool(op.gradient_op), stream_dirs=dirs, grid_limits=(limit_r, limit_c),
            output_dest=output_dest, fused_intermediates=int((spec or {}).get("intermediates", 0) or 0),
            fused_max_m_k=max_mk, bias_attr=bool(op.attrs.get("bias")), stacked_inputs=tuple(stacked),
            sparse=sparse, untilize=bool(op.untilize_output), pad_dims=pad_dims)

    def _pad_dims(self, op: Any, shape: Tuple[int, int, int], in_shapes: Sequence[Tuple[int, int, int]],
                  reduce_dim: str, sparse: bool, limits: Tuple[int, int]) -> Tuple[bool, bool]:
        """Which output dimensions (rows, cols) ``op`` may pad (OpModel.padding): never a dimension that
        is contracted or reduced (the padded tiles would reach valid ones), nor one a fused op keeps on one
        core (a sparse matmul's padded rows are rows its index never names: zeros); every operand that spans the
        dimension must span it exactly (its edge gets the same pad), and each reader must be able to drop
        the padding (a queue crops it on the host; an op reads it through ``input_N_unpad``, see :func:`pybuda.balancer.edges.edge_unpad`)."""
        if op.type not in _PADDABLE or op.gradient_op:
            return (False, False)
        can_r, can_c = True, True
        if op.type == "reduce":
            can_r, can_c = reduce_dim != "r", reduce_dim != "c"
        elif op.type == "fused_op":
            can_r, can_c = not limits[0], not limits[1]
        # every operand padded along a dimension must span it exactly (no in-kernel broadcast of a smaller one)
        for i, s in enumerate(in_shapes):
            pr, pc = _operand_padding(op.type, sparse, i, (1, 1))
            can_r = can_r and not (pr and s[1] != shape[1])
            can_c = can_c and not (pc and s[2] != shape[2])
        return (can_r, can_c)

    @staticmethod
    def _stream_dirs(op: Any, z: int, reduce_dim: str, feeds_queue: bool, limit_r: int, limit_c: int) -> FrozenSet[str]:
        """Directions this op may t-stream in. Not: ops writing queues (the queue/host would see the
        slices), untilizing or gradient ops, splice and other data-movement ops; matmuls only with
        z == 1 (the other operand is broadcast along z); reduces only across the reduced dimension."""
        if op.type in _NO_STREAM_TYPES or op.untilize_output or op.gradient_op or feeds_queue:
            return frozenset()
        if op.type in _MATMUL:
            if z != 1 or op.attrs.get("accumulate") or op.attrs.get("identity"):
                return frozenset()
            return frozenset({"r", "c"})
        if op.type == "reduce":
            return frozenset({"c"} if reduce_dim == "r" else {"r"} if reduce_dim == "c" else set())
        dirs = {"r", "c"}
        if limit_r:
            dirs.discard("r")
        if limit_c:
            dirs.discard("c")
        return frozenset(dirs)

    def signature(self, op: Any) -> Tuple[Any, ...]:
        """Cache key: everything the legal op models and their costs depend on."""
        f = self.facts(op)
        override = self.config.balancer_op_overrides.get(op.name)
        fused = _freeze(fused_spec(op, getattr(self.graph, "fused_ops", None))) if op.type == "fused_op" else None
        return (f, _freeze(op.attrs), _freeze(op.input_tms), op.math_fidelity, bool(op.untilize_output),
                _freeze(dataclasses.asdict(override)) if override is not None else None, fused,
                getattr(op, "tags", {}).get(sparse.DIGEST_TAG))  # a sparse matmul's cost reads its index

    # -- enumeration -------------------------------------------------------------------------------
    def models(self, op: Any) -> List[OpModel]:
        """All legal op models of ``op``; raises CompileError if there is none."""
        key = self.signature(op)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._enumerate(op)
        return hit

    def _stream_options(self, op: Any, f: OpFacts, override: Any) -> List[Tuple[int, int]]:
        shape = getattr(override, "t_stream_shape", None) if override else None
        direction = getattr(override, "t_stream_dir", None) if override else None
        direction = {"rz": "r", "cz": "c", None: None}.get(direction, direction)
        if shape is not None:
            fr, fc = int(shape[0]), int(shape[1])
            if fr < 1 or fc < 1 or (fr > 1 and fc > 1):
                raise CompileError(f"override_t_stream_shape {tuple(shape)}: one factor must be 1",
                                   stage=STAGE, op=op.name)
            if direction == "n" and (fr, fc) != (1, 1):
                raise CompileError(f"override_t_stream_shape {tuple(shape)} contradicts t_stream_dir 'n'",
                                   stage=STAGE, op=op.name)
            if direction in ("r", "c") and ((direction == "r" and fc > 1) or (direction == "c" and fr > 1)):
                raise CompileError(f"override_t_stream_shape {tuple(shape)} contradicts t_stream_dir "
                                   f"'{override.t_stream_dir}'", stage=STAGE, op=op.name)
            for d, factor, dim, dim_name in (("r", fr, f.rt, "rows"), ("c", fc, f.ct, "columns")):
                if factor > 1 and d not in f.stream_dirs:
                    raise CompileError(f"override t-streaming in '{d}': a {op.type} op "
                                       f"{self._why_no_stream(op, f, d)}", stage=STAGE, op=op.name)
                if dim % factor:
                    raise CompileError(f"override_t_stream_shape {tuple(shape)}: factor {factor} does not divide "
                                       f"the op's {dim} tile {dim_name}", stage=STAGE, op=op.name)
            return [(fr, fc)]
        if direction == "n":
            return [(1, 1)]
        if direction in ("r", "c"):
            if direction not in f.stream_dirs:
                raise CompileError(f"override_t_stream_dir '{override.t_stream_dir}': a {op.type} op "
                                   f"{self._why_no_stream(op, f, direction)}", stage=STAGE, op=op.name)
            dim = f.rt if direction == "r" else f.ct
            opts = [(d, 1) if direction == "r" else (1, d) for d in divisors(dim) if d > 1]
            if not opts:
                raise CompileError(f"override_t_stream_dir '{override.t_stream_dir}': the op has a single tile "
                                   f"{'row' if direction == 'r' else 'column'}, nothing to stream",
                                   stage=STAGE, op=op.name)
            return opts
        opts = [(1, 1)]
        if self.config.enable_t_streaming:
            if "r" in f.stream_dirs:
                opts += [(d, 1) for d in divisors(f.rt) if d > 1]
            if "c" in f.stream_dirs:
                opts += [(1, d) for d in divisors(f.ct) if d > 1]
        return opts

    @staticmethod
    def _why_no_stream(op: Any, f: OpFacts, d: str) -> str:
        if f.output_dest != "op":
            return "that writes a queue cannot t-stream"
        if op.untilize_output or op.gradient_op:
            return "that untilizes or accumulates gradients cannot t-stream"
        if op.type in _MATMUL:
            return "can t-stream only with z == 1 and without accumulate/sparse attributes"
        if op.type == "reduce":
            return f"reducing over '{f.reduce_dim}' cannot stream in '{d}'"
        return "cannot t-stream in that direction"

    def _enumerate(self, op: Any) -> List[OpModel]:
        f = self.facts(op)
        override = self.config.balancer_op_overrides.get(op.name)
        grid_override = tuple(override.grid_shape) if override is not None and override.grid_shape else None
        u_kt_override = override.u_kt if override is not None else None
        if u_kt_override is not None:
            if f.type not in _MATMUL and not (f.type == "reduce" and f.reduce_dim in ("r", "c")):
                raise CompileError(f"override_u_kt({u_kt_override}): only matmul and r/c reduce ops have u_kt",
                                   stage=STAGE, op=op.name)
            if u_kt_override < 1 or f.k % u_kt_override:
                raise CompileError(f"override_u_kt({u_kt_override}) does not divide the inner dimension "
                                   f"K = {f.k} tiles (u_kt·m_k must equal K)", stage=STAGE, op=op.name)
            if f.untilize and f.type in _MATMUL and u_kt_override != f.k:
                raise CompileError(f"override_u_kt({u_kt_override}): this matmul untilizes its output, which needs "
                                   f"m_k == 1, i.e. u_kt == K = {f.k}", stage=STAGE, op=op.name)
        streams = self._stream_options(op, f, override)
        if grid_override is not None:
            self._check_grid_override(op, f, grid_override, streams)
        dest = self.device.max_ublock_tiles(f.acc_df)
        diag = _Diag()
        models: List[OpModel] = []
        for fr, fc in streams:
            rt_s, ct_s = f.rt // fr, f.ct // fc
            t = f.z * fr * fc
            for gr in divisors(rt_s):
                if f.grid_limits[0] and gr > f.grid_limits[0]:
                    break
                for gc in divisors(ct_s):
                    if f.grid_limits[1] and gc > f.grid_limits[1]:
                        break
                    if grid_override is not None and (gr, gc) != grid_override:
                        continue
                    if not self._grid_fits(gr, gc):
                        continue
                    m = self._fit(op, f, override, t, (fr, fc), gr, gc, dest, diag)
                    if m is not None:
                        models.append(m)
        if grid_override is None and (1, 1) in streams and (not models or self._narrow(models)):
            models = models + self._padded_models(op, f, override, dest, diag,
                                                  exact_cores=max((m.cores for m in models), default=0))
        if not models:
            raise CompileError(self._no_model_reason(op, f, grid_override, diag), stage=STAGE, op=op.name)
        models.sort(key=lambda m: (m.cores, m.stream_factor, m.cycles, m.grid_shape))
        return models

    def _narrow(self, models: List[OpModel]) -> bool:
        """Whether the exact layouts leave most of the grid idle (at most 1/:data:`NARROW_FRACTION` of its
        cores): an awkward tile count, such as Whisper's 1500 positions (47 tiles, a prime), whose attention
        softmax would otherwise run on one core. Ribbon keeps TT-Buda's rule: padding only when nothing fits."""
        return self.pads_narrow_ops and max(m.cores for m in models) * NARROW_FRACTION <= self.rows * self.cols

    def _padded_models(self, op: Any, f: OpFacts, override: Any, dest: int, diag: "_Diag",
                       exact_cores: int = 0) -> List[OpModel]:
        """Layouts of a padded output (OpModel.padding), tried when no exact layout fits, or beside exact
        ones that are narrow (:meth:`_narrow`, the widest on ``exact_cores`` cores; then only grids wider
        than that, with paddings adding at most 1/:data:`PAD_WASTE` of the tiles): for each grid side ``g``
        the dimension is padded up to the next multiple of ``g`` (spec §2.2: the grid, mblock and ublock
        must divide the tensor exactly, and padding is the netlist's only way to change it)."""
        if not any(f.pad_dims):
            return []
        max_r = max(self.rows, self.cols) if self.allow_transpose else self.rows
        max_c = max(self.rows, self.cols) if self.allow_transpose else self.cols
        models: List[OpModel] = []
        for gr, rt in padded_sides(f.rt, max_r, f.pad_dims[0]):
            for gc, ct in padded_sides(f.ct, max_c, f.pad_dims[1]):
                if (rt, ct) == (f.rt, f.ct) or not self._grid_fits(gr, gc):
                    continue
                if exact_cores and (gr * gc <= exact_cores or (rt * ct - f.rt * f.ct) * PAD_WASTE > f.rt * f.ct):
                    continue  # beside exact layouts, only a wider grid for a padding that adds little work
                padded = dataclasses.replace(f, rt=rt, ct=ct)
                m = self._fit(op, padded, override, f.z, (1, 1), gr, gc, dest, diag)
                if m is not None:
                    pad = (rt - f.rt, ct - f.ct)
                    k_pads = m.input_padding or ((0, 0),) * f.n_inputs  # a sparse matmul's padded K (in1 rows)
                    outs = [_operand_padding(f.type, f.sparse, i, pad) for i in range(f.n_inputs)]
                    ins = tuple((o[0] + k[0], o[1] + k[1]) for o, k in zip(outs, k_pads))
                    models.append(dataclasses.replace(m, padding=pad, input_padding=ins))
        return models

    def _grid_fits(self, gr: int, gc: int) -> bool:
        if gr <= self.rows and gc <= self.cols:
            return True
        return self.allow_transpose and gc <= self.rows and gr <= self.cols

    def _check_grid_override(self, op: Any, f: OpFacts, grid: Tuple[int, int], streams: List[Tuple[int, int]]) -> None:
        gr, gc = grid
        if gr < 1 or gc < 1:
            raise CompileError(f"override_op_size{grid}: grid sides must be positive", stage=STAGE, op=op.name)
        if not self._grid_fits(gr, gc):
            raise CompileError(f"override_op_size{grid} does not fit the device's {self.rows}x{self.cols} worker grid",
                               stage=STAGE, op=op.name)
        if f.grid_limits[0] and gr > f.grid_limits[0] or f.grid_limits[1] and gc > f.grid_limits[1]:
            raise CompileError(f"override_op_size{grid}: this fused op reduces along a dimension that must stay on "
                               f"one core (grid limit {f.grid_limits})", stage=STAGE, op=op.name)
        if not any((f.rt // fr) % gr == 0 and (f.ct // fc) % gc == 0 for fr, fc in streams):
            raise CompileError(
                f"override_op_size{grid}: grid rows {gr} must divide the op's {f.rt} tile rows and grid columns {gc} "
                f"its {f.ct} tile columns (after t-streaming {[s for s in streams]})", stage=STAGE, op=op.name)

    def _no_model_reason(self, op: Any, f: OpFacts, grid: Optional[Tuple[int, int]], diag: "_Diag") -> str:
        budget_kib = self.budget / 1024
        if diag.stacks:
            return ("no blocking lines up with the hstack/vstack TMs on its inputs (the stacked slice width and the "
                    "op's ublock / u_kt along that dimension must divide one another)")
        if diag.min_l1 is not None:
            what = f"override_op_size{grid}: " if grid else ""
            return (f"{what}no op model fits L1: the smallest layout tried needs {diag.min_l1 / 1024:.0f} KiB per core, "
                    f"the op-buffer budget is {budget_kib:.0f} KiB (shape z={f.z} rt={f.rt} ct={f.ct}, "
                    f"{self.rows}x{self.cols} grid)")
        return (f"no grid of the {self.rows}x{self.cols} worker grid divides the op's {f.rt}x{f.ct} tiles "
                f"(t-streaming {'on' if self.config.enable_t_streaming else 'off'})")

    def _model(self, op: Any, f: OpFacts, t: int, stream: Tuple[int, int], grid: Tuple[int, int], mb: Tuple[int, int],
               ub: Tuple[int, int], u_kt: int, m_k: int, buf: int, pset: Tuple[int, ...], dram: Tuple[int, ...],
               l1: int, override: Any) -> OpModel:
        if stream == (1, 1):
            direction = "n"
        else:
            direction = "r" if stream[0] > 1 else "c"
            requested = getattr(override, "t_stream_dir", None) if override is not None else None
            if requested in ("rz", "cz") and requested[0] == direction:
                direction = requested
        in_mult = dict(getattr(override, "input_buffer_multiplier", None) or {}) if override is not None else {}
        # override_input_buffer_multiplier: the streamed buffer of that operand, times the multiplier (the L1
        # check above counted it); the netlist carries it as input_buf_min_size_tiles (0 = the default size).
        min_tiles: Tuple[int, ...] = ()
        if any(int(i) < f.n_inputs and int(i) not in pset for i in in_mult):
            min_tiles = tuple(self._stream_buffer_tiles(f, i, ub[0], ub[1], mb, u_kt) * int(in_mult[i])
                              if i in in_mult and i not in pset else 0 for i in range(f.n_inputs))
        layout = dict(grid_shape=grid, t=t, mblock=mb, ublock=ub, ublock_order="r", u_kt=u_kt, m_k=m_k,
                      buf_size_mb=buf, t_stream_dir=direction, t_stream_factor=stream, prologue_inputs=pset,
                      l1_bytes=int(l1), dram_inputs=dram, input_buf_min_size_tiles=min_tiles)
        model = OpModel(**layout)
        sources = []
        for i, kind in enumerate(f.in_kinds):
            if kind == "op":
                sources.append("op")
            elif kind in _PARAM_KINDS:
                sources.append("prologue" if i in pset else "dram")
            elif kind == "input":
                sources.append(input_queue_loc(self.config, self.device))
            else:
                sources.append("dram")
        caps = tuple(None if kind == "op" else f.in_raw[i][1] for i, kind in enumerate(f.in_kinds))
        ctx = cost.BandwidthContext(tuple(sources), f.output_dest, caps)
        priced = op
        if op.attrs.get("approximate_mode") and op.type != "fused_op" and not self.prices_approximate_mode:
            priced = dataclasses.replace(op, attrs={k: v for k, v in op.attrs.items() if k != "approximate_mode"})
        fused_ops = getattr(self.graph, "fused_ops", None)
        if priced is op:  # the usual case: both figures from one blocking and one set of operand fetches
            br, dram_bytes = cost.op_costs(op, model, self.device, ctx, fused_ops=fused_ops, bandwidth=self.bandwidth)
        else:
            br = cost.op_cycle_breakdown(priced, model, self.device, ctx, fused_ops=fused_ops, bandwidth=self.bandwidth)
            dram_bytes = cost.dram_bytes_per_input(op, model, ctx)
        return OpModel(**layout, cycles=br.cycles, kernel_cycles=br.kernel, dram_bytes=dram_bytes)


def _operand_padding(op_type: str, sparse: bool, i: int, pad: Tuple[int, int]) -> Tuple[int, int]:
    """The (rows, cols) tiles operand ``i`` is padded by when the op's output is padded by ``pad``: a
    matmul's in0 along its rows, in1 along its columns (K is never padded); a reduce's operand along
    the kept dimension; a sparse matmul's picker and index not at all; others like the output."""
    pr, pc = pad
    if op_type in _MATMUL:
        if sparse:
            return (0, pc) if i == 1 else (0, 0)
        return {0: (pr, 0), 1: (0, pc)}.get(i, (pr, pc))
    return (pr, pc)


# --------------------------------------------------------------------------------------------------
# Public helpers
# --------------------------------------------------------------------------------------------------

def input_queue_loc(config: Any, device: Any) -> str:
    """Where graph input queues live: ``host`` when ``input_queues_on_host``, except on Grayskull,
    which cannot read host memory fast, so TT-Buda's placer moves its inputs to DRAM (spec §4.5)."""
    arch = str(getattr(getattr(device, "arch", None), "value", "")).lower()
    if not getattr(config, "input_queues_on_host", True) or arch == "grayskull":
        return "dram"
    return "host"


def legal_op_models(op: Any, graph: Any, device: Any, config: Any) -> List[OpModel]:
    """All legal op models of ``op`` (a BudaOp of ``graph``) on ``device`` under ``config``, sorted by
    (cores, t-stream factor, cycles). Raises CompileError when there is none (naming the op and why)."""
    return Legalizer(graph, device, config).models(op)


__all__ = ["Legalizer", "OpFacts", "legal_op_models", "input_queue_loc"]
