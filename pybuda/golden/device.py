"""The golden backend: executes a parsed netlist with the chip's numerics.

It reads nothing but the netlist and the tensors in its queues, as a real backend would. Programs are
interpreted instruction by instruction (param, var, staticvar, varinst, loop/endloop, execute,
allocate/deallocate queue); queues keep read/write pointers that run modulo 2·entries; each
``execute`` runs one graph over its ``input_count`` inputs, op by op in dependency order.

Numerics follow the chip (``reference/netlist_backend_spec.md`` §4, §7): every op input is unpacked to
its ``in_df``, matmuls and multiplies use the math-fidelity phases, results are rounded to the Dest
accumulation format ``acc_df``, attribute relu is applied, and the output is packed to ``out_df``;
queues store values in their ``df``. ``fast=True`` skips every rounding and fidelity step (plain
float32, BBE golden parity) for quick functional runs. One op is executed by :func:`run_op`, which needs
no device: the compiler's float32 check of a lowered graph (``pybuda.passes.lowered.buda_eval``) calls it
too, so the op semantics exist once.

Speed (``benchmarks/bench_golden.py``): an operand already stored in its ``in_df`` is not rounded
again (TMs move decoded datums; rounding is idempotent); constant operands (ram entries, prologue
reads) keep batch dimension 1 and are prepared once per queue write — TMs, fidelity pieces, decoded
sparse indices — and a constant right-hand matmul operand is never copied per input (one GEMM over the
whole batch); a matmul bias is added by broadcasting its tiles' row 0, never materialised; Dest rounding
is skipped where the output packing subsumes it. Peak memory is measured by the same benchmark.

Memory: what the golden holds is what the chip would — an op's output lives until its last reader in
the graph has run (or in the queue it feeds), an e2e queue's entries until its ``deallocate_queue``
(the placer hands that DRAM to the next queue), and a broadcast constant whose rows are alike (a bias
or a layer-norm weight) stays a stride-0 view of one row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from pybuda.golden import formats
from pybuda.golden import kernels as golden_ops
from pybuda.errors import InputError, NetlistError, quote
from pybuda.netlist import model as nl
from pybuda.netlist.limits import size_problems
from pybuda.netlist.tms import Broadcast, TileBroadcast, apply_tms
from pybuda.dtypes import DataFormat, MathFidelity

log = logging.getLogger(__name__)

TILE = 32


class QueueState:
    """One queue's buffer: ``entries`` slots of ``[t, R, C]`` float32, plus pointers modulo 2·entries."""

    def __init__(self, qdef: nl.QueueDef):
        self.qdef = qdef
        self.entries = qdef.entries
        self.slots: List[Optional[torch.Tensor]] = [None] * qdef.entries
        self._batch: List[Optional[Tuple[torch.Tensor, int]]] = [None] * qdef.entries
        self.rd = 0
        self.wr = 0
        self.version = 0  # bumped on every write: the golden caches values derived from ram entries
        self.released = False  # entries dropped by deallocate_queue (for the error of a read after it)
        shape = qdef.shape
        self.entry_shape = (shape.t, shape.rt * TILE, shape.ct * TILE)

    @property
    def occupancy(self) -> int:
        return (self.wr - self.rd) % (2 * self.entries)

    def free_slots(self) -> int:
        return self.entries - self.occupancy

    def slot(self, position: int) -> torch.Tensor:
        value = self.slots[position % self.entries]
        if value is None:
            why = ("freed by deallocate_queue and not written since (the program reads a queue outside its "
                   "lifetime)") if self.released else "never written (the program reads an empty queue)"
            raise NetlistError(f"queues.{self.qdef.name}", f"read of entry {position % self.entries}, which was {why}")
        return value

    def release(self) -> None:
        """End of the queue's lifetime (``deallocate_queue``): its DRAM may be handed to another queue, so
        its entries are dropped; pointers are kept, and a later write starts a new lifetime."""
        self.slots = [None] * self.entries
        self._batch = [None] * self.entries
        self.released = True
        self.version += 1

    def write(self, position: int, value: torch.Tensor) -> None:
        self.slots[position % self.entries] = value
        self._batch[position % self.entries] = None
        self.version += 1

    def write_batch(self, position: int, values: torch.Tensor) -> int:
        """Write entries ``values[i]`` at consecutive positions from ``position``; returns the next one.
        Remembers that they are slices of one tensor, so that reading them back in order is a view."""
        for i, entry in enumerate(values):
            slot = position % self.entries
            self.slots[slot] = entry
            self._batch[slot] = (values, i)
            position = self.advance(position, 1)
        self.version += 1
        return position

    def read_entries(self, positions: Sequence[int]) -> torch.Tensor:
        """Entries at ``positions`` as ``[n, t, R, C]`` (a view when they were written as one batch)."""
        first = self._batch[positions[0] % self.entries]
        if first is not None:
            batch, i0 = first
            if i0 + len(positions) <= batch.shape[0] and all(
                    self._batch[p % self.entries] is not None and self._batch[p % self.entries][0] is batch
                    and self._batch[p % self.entries][1] == i0 + k for k, p in enumerate(positions)):
                return batch[i0:i0 + len(positions)]
        if len(positions) == 1:
            return self.slot(positions[0]).unsqueeze(0)
        return torch.stack([self.slot(p) for p in positions])

    def drop(self, start: int, end: int) -> None:
        """Forget the data of the entries from pointer ``start`` up to ``end`` (both modulo 2·entries): the
        read pointer moved past them, so on the chip their space belongs to the writer again. Only for a
        queue no program ever moves the read pointer back on (the device checks that), so nothing reads them."""
        for i in range((end - start) % (2 * self.entries)):
            slot = (start + i) % self.entries
            self.slots[slot] = None
            self._batch[slot] = None

    def zero(self) -> None:
        self.slots = [torch.zeros(self.entry_shape) for _ in range(self.entries)]
        self._batch = [None] * self.entries
        self.version += 1

    def advance(self, pointer: int, count: int) -> int:
        return (pointer + count) % (2 * self.entries)


@dataclass
class ExecuteStats:
    """What one program run did (for logs and tests)."""

    executes: int = 0
    op_runs: int = 0
    graphs: List[str] = field(default_factory=list)


#: Default bound on the float32 memory a golden device may need for all its queues' entries together.
GOLDEN_MEMORY_LIMIT = 16 << 30


def check_memory(netlist: nl.Netlist, limit: int = GOLDEN_MEMORY_LIMIT) -> None:
    """Raise NetlistError unless every size of ``netlist`` is bounded (:mod:`pybuda.netlist.limits`) and
    its queues, held as float32 entries, fit in ``limit`` bytes.

    The golden device allocates per queue entry, and a netlist may come from a device image that was
    never validated: this is checked before anything is allocated."""
    for path, message in size_problems(netlist):
        raise NetlistError(path, message)
    total = 0
    for name, q in netlist.queues.items():
        if not isinstance(q.entries, int) or q.entries < 1:
            raise NetlistError(f"queues.{name}.entries", f"must be an integer >= 1, got {quote(q.entries)}")
        shape = q.shape
        if min(shape) < 1:
            raise NetlistError(f"queues.{name}", f"entries of {list(shape)} tiles: every size must be >= 1")
        entry_bytes = shape.t * shape.rt * TILE * shape.ct * TILE * 4
        total += q.entries * (entry_bytes + 16)  # +16: the two per-entry list slots
        if total > limit:
            raise NetlistError(f"queues.{name}.entries",
                               f"the golden device would need {total / (1 << 30):.1f} GiB for queue entries "
                               f"(this queue: {q.entries} entries of {list(shape)} tiles), over its limit of "
                               f"{limit / (1 << 30):.1f} GiB")


class GoldenDevice:
    """A simulated chip loaded with one netlist.

    Construction checks the netlist's sizes and the memory its queues need (:func:`check_memory`,
    NetlistError when over ``memory_limit`` bytes) before allocating anything.

    Host-side API: :meth:`push` (activations into HOST-fed queues), :meth:`write_ram` (parameters and
    constants), :meth:`run_program`, :meth:`pop` (read op-fed output queues).
    """

    def __init__(self, netlist: nl.Netlist, fast: bool = False, memory_limit: int = GOLDEN_MEMORY_LIMIT,
                 tf32_operands: bool = False):
        self.netlist = netlist
        self.fast = fast
        # Off by default: see source_register (the compiler's exactness rules assume Float32 operands whole).
        self.tf32_operands = tf32_operands and not fast
        check_memory(netlist, memory_limit)
        self.queues: Dict[str, QueueState] = {name: QueueState(q) for name, q in netlist.queues.items()}
        self.static_vars: Dict[str, Dict[str, int]] = {}
        self._order = {name: _topological(graph) for name, graph in netlist.graphs.items()}
        self._queue_producers = {q.input: name for name, q in netlist.queues.items() if not q.is_host_fed}
        self._last_reads = {name: _last_reads(graph, self._order[name], self._queue_producers)
                            for name, graph in netlist.graphs.items()}
        self.stats = ExecuteStats()
        # Constant operands (ram entries and prologue reads) with their TMs and format already applied,
        # plus what ops derive from them (fidelity pieces, broadcast bias, decoded sparse indices):
        # (op, input index) -> (source key, value, derived-values dict). Parameters do not change
        # between executes, so this work is done once; a write to the queue changes the key.
        self._const_cache: Dict[Tuple[str, str, int], Tuple[Tuple, torch.Tensor, Dict]] = {}
        # Streaming queues whose read pointer only ever advances: an entry read past is never read again, so
        # its value is dropped then (a graph's activations do not stay alive until the next push overwrites
        # them). A queue some program sets ``rd_ptr_global`` on may be read again from an earlier position.
        rewound = {name for program in netlist.programs for inst in program.instructions
                   if isinstance(inst, nl.Execute)
                   for name, s in inst.queue_settings.items() if s.rd_ptr_global is not None}
        self._drop_consumed = {name for name, q in netlist.queues.items() if q.type == "queue"} - rewound

    # --- host side ----------------------------------------------------------------------------
    def _queue(self, name: str) -> QueueState:
        try:
            return self.queues[name]
        except KeyError:
            raise InputError(f"netlist has no queue '{name}'; queues: {sorted(self.queues)}") from None

    def _to_device(self, q: QueueState, value: torch.Tensor, owned: bool = False) -> torch.Tensor:
        value = value.to(torch.float32)
        if tuple(value.shape[-3:]) != q.entry_shape:
            raise InputError(f"queue '{q.qdef.name}' holds entries of shape {list(q.entry_shape)} "
                             f"(t, rows, cols), got {list(value.shape)}")
        return value if self.fast else formats.quantize(value, q.qdef.df, in_place=owned)

    def push(self, queue_name: str, values: torch.Tensor) -> None:
        """Push entries ``[n, t, R, C]`` into a HOST-fed streaming queue; InputError when it would overflow."""
        q = self._queue(queue_name)
        if not q.qdef.is_host_fed:
            raise InputError(f"queue '{queue_name}' is written by op '{q.qdef.input}', not by the host")
        if values.dim() == 3:
            values = values.unsqueeze(0)
        values_in = values
        if values.shape[0] > q.free_slots():
            raise InputError(f"queue '{queue_name}' has room for {q.free_slots()} more entries, "
                             f"got {values.shape[0]}")
        values = self._to_device(q, values)
        q.wr = q.write_batch(q.wr, values.clone() if values.data_ptr() == values_in.data_ptr() else values)

    def write_ram(self, queue_name: str, value: torch.Tensor, entry: int = 0, owned: bool = False) -> None:
        """Write one entry ``[t, R, C]`` of a parameter/constant queue (random access). ``owned``: the caller
        hands ``value`` over (nobody else holds it), so it is quantised in place and kept, not copied: a
        large model's weights are then allocated once, not twice."""
        q = self._queue(queue_name)
        value = value.reshape(q.entry_shape) if value.dim() != 3 else value
        stored = self._to_device(q, value, owned)
        q.write(entry, stored.clone() if stored.data_ptr() == value.data_ptr() and not owned else stored)

    def read_ram(self, queue_name: str, entry: int = 0) -> torch.Tensor:
        return self._queue(queue_name).slot(entry).clone()

    def pop(self, queue_name: str, count: int = 1) -> torch.Tensor:
        """Pop ``count`` entries from an output queue, as ``[count, t, R, C]``."""
        q = self._queue(queue_name)
        if count > q.occupancy:
            raise InputError(f"queue '{queue_name}' holds {q.occupancy} entries, {count} requested")
        positions = [q.rd + i for i in range(count)]
        out = q.read_entries(positions).clone()
        self._advance_read(queue_name, q, q.advance(q.rd, count))
        return out

    def _advance_read(self, name: str, q: QueueState, rd: int) -> None:
        if name in self._drop_consumed:
            q.drop(q.rd, rd)
        q.rd = rd

    # --- programs -----------------------------------------------------------------------------
    def run_program(self, name: str, params: Optional[Mapping[str, int]] = None) -> ExecuteStats:
        """Interpret program ``name``; ``params`` supplies its ``param`` values (e.g. ``$p_loop_count``)."""
        program = next((p for p in self.netlist.programs if p.name == name), None)
        if program is None:
            raise InputError(f"netlist has no program '{name}'; programs: {[p.name for p in self.netlist.programs]}")
        params = dict(params or {})
        env: Dict[str, int] = {}
        statics = self.static_vars.setdefault(name, {})
        loops: List[List[int]] = []  # [start index, remaining iterations]
        pc = 0
        insts = program.instructions
        while pc < len(insts):
            inst = insts[pc]
            if isinstance(inst, nl.Param):
                for pname in inst.names:
                    if pname not in params:
                        raise InputError(f"program '{name}' needs parameter {pname}")
                    env[pname] = int(params[pname])
            elif isinstance(inst, nl.Var):
                env.update(inst.values)
            elif isinstance(inst, nl.StaticVar):
                for var, value in inst.values.items():
                    statics.setdefault(var, value)
                env.update(statics)
            elif isinstance(inst, nl.VarInst):
                self._varinst(inst, env)
                if inst.out in statics:
                    statics[inst.out] = env[inst.out]
            elif isinstance(inst, nl.Loop):
                count = nl.resolve_operand(inst.count, env)
                if count < 1:
                    raise NetlistError(f"programs.{name}", f"loop count must be >= 1, got {count}")
                loops.append([pc, count])
            elif isinstance(inst, nl.EndLoop):
                loops[-1][1] -= 1
                if loops[-1][1] > 0:
                    pc = loops[-1][0]
                else:
                    loops.pop()
            elif isinstance(inst, nl.Execute):
                self._execute(inst, env)
            elif isinstance(inst, nl.DeallocateQueue):
                # The chip hands the queue's DRAM to the next e2e queue: its values end here too, which
                # keeps the golden's memory to the queues that are alive, as the placer's is.
                for qname in inst.names:
                    self._queue(qname).release()
            # allocate_queue only declares where a lifetime starts: nothing to do functionally.
            pc += 1
        return self.stats

    @staticmethod
    def _varinst(inst: nl.VarInst, env: Dict[str, int]) -> None:
        args = [nl.resolve_operand(a, env) for a in inst.args]
        cur = env.get(inst.out, 0)
        if inst.op == "set":
            env[inst.out] = args[0]
        elif inst.op == "add":
            env[inst.out] = args[0] + args[1]
        elif inst.op == "mul":
            env[inst.out] = args[0] * args[1]
        elif inst.op == "inc":
            env[inst.out] = cur + args[0]
        elif inst.op == "incwrap":
            env[inst.out] = (cur + args[0]) % args[1]
        else:
            raise NetlistError("programs.varinst", f"unknown varinst op '{inst.op}'")

    # --- execute ------------------------------------------------------------------------------
    def _execute(self, inst: nl.Execute, env: Dict[str, int]) -> None:
        graph = self.netlist.graphs[inst.graph_name]
        n = graph.input_count
        settings = inst.queue_settings
        for qname, s in settings.items():
            q = self.queues[qname]
            if s.zero is not None and nl.resolve_operand(s.zero, env):
                q.zero()
            if s.rd_ptr_global is not None and q.qdef.type == "queue":
                q.rd = nl.resolve_operand(s.rd_ptr_global, env) % (2 * q.entries)
        values: Dict[str, torch.Tensor] = {}
        consumed: Dict[str, int] = {}
        last_reads = self._last_reads[inst.graph_name]
        for op_name in self._order[inst.graph_name]:
            op = graph.ops[op_name]
            inputs, caches = [], []
            for i, name in enumerate(op.inputs):
                x, cache = self._read_input(graph, op, i, name, values, settings, env, n, consumed)
                inputs.append(x)
                caches.append(cache)
            values[op_name] = self._run_op(op, inputs, caches, n)
            self.stats.op_runs += 1
            del inputs, caches
            # An output no queue keeps is freed once its last reader has run, as the chip's
            # buffers are: a graph's peak is then its live values, not all of its ops' outputs.
            for done in last_reads.get(op_name, ()):
                del values[done]
        for op_name, value in values.items():
            qname = self._queue_producers.get(op_name)
            if qname is not None:
                self._write_output(qname, graph.ops[op_name], value, settings.get(qname), env)
        # Entries a streaming read consumed are freed: the global read pointer moves past them (or by
        # global_rdptr_autoinc per input when the program asks for that explicitly).
        for qname, end in consumed.items():
            q = self.queues[qname]
            inc = nl.resolve_operand(settings.get(qname, nl.QueueSetting()).autoincs("queue")[1], env)
            self._advance_read(qname, q, q.advance(q.rd, inc * n) if inc else end % (2 * q.entries))
        self.stats.executes += 1
        self.stats.graphs.append(inst.graph_name)

    def _read_input(self, graph: nl.GraphDef, op: nl.NetlistOp, index: int, name: str,
                    values: Dict[str, torch.Tensor], settings: Mapping[str, nl.QueueSetting],
                    env: Dict[str, int], n: int, consumed: Dict[str, int]) -> Tuple[torch.Tensor, Optional[Dict]]:
        """Operand ``index`` of ``op`` after unpad, TMs and pad, unpacked to its ``in_df``.

        Returns ``(value, cache)``: ``cache`` is the derived-values dict of a constant operand (a ram
        entry or a prologue read, kept with batch dimension 1), else None.
        """
        if name in values:
            return self._transform(op, index, values[name], graph.ops[name].out_df), None
        q = self.queues.get(name)
        if q is None:
            raise NetlistError(f"graphs.{op.name}.inputs", f"'{name}' is neither an op of this graph nor a queue")
        s = settings.get(name, nl.QueueSetting())
        prologue = s.prologue is not None and nl.resolve_operand(s.prologue, env)
        if q.qdef.type == "ram" or prologue:
            base = nl.resolve_operand(s.rd_ptr_global, env) if s.rd_ptr_global is not None else 0
            key = (name, base % q.entries, q.version)
            cache_key = (graph.name, op.name, index)
            hit = self._const_cache.get(cache_key)
            if hit is None or hit[0] != key:
                value = _alike_as_broadcast(q.slot(base).unsqueeze(0), op.tms_of(index))
                value = self._transform(op, index, value, q.qdef.df)
                hit = self._const_cache[cache_key] = (key, value, {})
            return hit[1], hit[2]
        local = nl.resolve_operand(s.rd_ptr_local, env) if s.rd_ptr_local is not None else q.rd
        rd_inc = nl.resolve_operand(s.autoincs("queue")[0], env)
        positions = [local + i * rd_inc for i in range(n)]
        for pos in positions:
            # A read past the write pointer would block on the chip; say so instead of hanging.
            if (pos - q.rd) % (2 * q.entries) >= q.occupancy:
                raise NetlistError(f"queues.{name}", f"graph reads {n} entries starting at {local % q.entries} "
                                                     f"but the queue holds only {q.occupancy}: the queue is "
                                                     f"empty (push more inputs before running the program)")
        x = q.read_entries(positions)
        consumed[name] = local + n * rd_inc
        return self._transform(op, index, x, q.qdef.df), None

    def _transform(self, op: nl.NetlistOp, index: int, x: torch.Tensor, source_df: DataFormat) -> torch.Tensor:
        """TMs (unpad, TMs, pad), then the unpacker's conversion to ``in_df``.

        Data already stored in ``in_df`` is not rounded again: the chip's TMs move unpacked datums (a
        transpose or tile broadcast does not re-block a BFP tile), and every format's rounding is
        idempotent, so only a format conversion (``in_df`` differs from the producer's format) rounds.
        With ``tf32_operands``, a Float32 operand is then read through the 19-bit source registers
        (:func:`source_register`).
        """
        x = apply_tms(x, op.tms_of(index), op.input_unpad.get(index), op.input_pad.get(index))
        if self.fast:
            return x
        if op.in_df[index] != source_df:
            x = formats.quantize(x, op.in_df[index])
        return source_register(x, op.in_df[index]) if self.tf32_operands else x

    def _run_op(self, op: nl.NetlistOp, inputs: List[torch.Tensor], caches: List[Optional[Dict]],
                n: int) -> torch.Tensor:
        fused = None
        if op.op_class == "fused":
            fused = self.netlist.fused_ops.get(int(op.attr("fused_op_id", -1)))
            if fused is None:
                raise NetlistError(f"graphs.{op.name}.attributes.fused_op_id", "no such fused op")
        numerics = None if self.fast else OpNumerics.of(op, self.tf32_operands)
        return run_op(op.type, op.attributes, inputs, op.shape, n, fused=fused, numerics=numerics, caches=caches,
                      name=op.name)

    def _write_output(self, qname: str, op: nl.NetlistOp, value: torch.Tensor, s: Optional[nl.QueueSetting],
                      env: Dict[str, int]) -> None:
        q = self.queues[qname]
        if not self.fast and q.qdef.df != op.out_df:
            value = formats.quantize(value, q.qdef.df)
        if q.qdef.type == "ram" or op.gradient_op:
            position = nl.resolve_operand(s.wr_ptr_global, env) if s is not None and s.wr_ptr_global is not None else 0
            if op.gradient_op:
                # Accumulates in place, one input at a time: each partial sum is packed to the queue's format.
                acc = q.slots[position % q.entries]
                for entry in value:
                    acc = entry if acc is None else acc + entry
                    if not self.fast:
                        acc = formats.quantize(acc, q.qdef.df)
                q.write(position, acc.clone())
            else:
                q.write(position, value[-1].clone())
            return
        if value.shape[0] > q.free_slots():
            raise NetlistError(f"queues.{qname}", f"op '{op.name}' writes {value.shape[0]} entries into a queue with "
                                                  f"room for {q.free_slots()} (the host must pop outputs)")
        q.wr = q.write_batch(q.wr, value)


# Output formats whose packing gives the same result from a value or from its Float16_b truncation:
# bfloat16 truncation is idempotent, and B-family BFP rounding (add half an lsb, truncate, relative to
# the block maximum's exponent E) only reads bits down to 2^(E-7), all of which the truncation keeps
# (it keeps 7 bits below each value's own exponent, which is <= E, and never changes an exponent).
_SUBSUMES_FLOAT16_B_DEST = {DataFormat.Float16_b, DataFormat.Bfp8_b, DataFormat.Bfp4_b, DataFormat.Bfp2_b}


def _packing_subsumes_dest(numerics: "OpNumerics", attrs: Mapping[str, Any]) -> bool:
    """True when rounding to the Dest format (acc_df) cannot change what the packer produces."""
    return numerics.acc_df == DataFormat.Float16_b and numerics.out_df in _SUBSUMES_FLOAT16_B_DEST \
        and not attrs.get("relu_en")


# --- one op ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpNumerics:
    """The chip numerics of one op: its math fidelity and formats. ``None`` in their place means plain
    float32 (the golden's ``fast`` mode, and the compiler's check of a lowered graph)."""

    fidelity: MathFidelity
    in_df: Tuple[DataFormat, ...]
    acc_df: DataFormat
    out_df: DataFormat
    intermed_df: DataFormat
    #: Float32 operands read as TF32 (see :func:`source_register`; the device reads its own ops' operands
    #: that way before the kernel runs, a fused op its intermediates and reused Dest).
    tf32_operands: bool = False

    @classmethod
    def of(cls, op: nl.NetlistOp, tf32_operands: bool = False) -> "OpNumerics":
        """The numerics a netlist op declares."""
        return cls(op.math_fidelity, tuple(op.in_df), op.acc_df, op.out_df, op.intermed_df, tf32_operands)


def run_op(op_type: str, attrs: Mapping[str, Any], inputs: List[torch.Tensor], out_shape: nl.TileShape3, n: int, *,
           fused: Optional[nl.FusedOpDef] = None, numerics: Optional[OpNumerics] = None,
           caches: Optional[List[Optional[Dict]]] = None, name: str = "op") -> torch.Tensor:
    """Execute one netlist op: what :class:`GoldenDevice` does per op, usable without a device.

    ``inputs``: ``[N, t, R, C]`` operands after their TMs and unpacking (a constant operand may have
    N = 1); ``out_shape``: the op's declared (t, rt, ct); ``n``: inputs per execute (the result is
    broadcast to N = n when every operand was a constant); ``fused``: the fused-op definition of a
    ``fused_op``. ``numerics`` None computes in plain float32 (no fidelity, no Dest or output rounding);
    otherwise the result is rounded to ``acc_df`` where the chip's Dest would and packed to ``out_df``.
    ``caches``: per input, the derived-values dict of a constant operand, or None.
    """
    fidelity = None if numerics is None else numerics.fidelity
    in_dfs = (None,) * len(inputs) if numerics is None else numerics.in_df
    caches = list(caches) if caches is not None else [None] * len(inputs)
    cls = nl.op_class(op_type)
    if cls == "matmul":
        out = golden_ops.matmul(inputs, attrs, fidelity, out_shape, caches, in_dfs)
    elif cls == "binary":
        out = golden_ops.binary(op_type, inputs[0], inputs[1], fidelity, caches, in_dfs)
    elif cls == "unary":
        out = golden_ops.unary(op_type, inputs[0], attrs)
    elif cls == "reduce":
        out = golden_ops.reduce(inputs[0], attrs)
    elif cls == "splice":
        out = golden_ops.splice(inputs, attrs, out_shape)
    elif cls == "fused":
        if fused is None:
            raise NetlistError(f"graphs.{name}.attributes.fused_op_id", "no such fused op")
        out = _run_fused(fused, inputs, caches, numerics, bool(attrs.get("approximate_mode")))
    else:
        raise NetlistError(f"graphs.{name}.type", f"golden backend does not implement op type '{op_type}'")
    if numerics is not None and numerics.acc_df != DataFormat.Float32 and cls in ("matmul", "binary", "fused") \
            and not _packing_subsumes_dest(numerics, attrs):
        out = formats.accumulate(out, numerics.acc_df)
    out = golden_ops.apply_relu(out, attrs)
    expected = (out_shape.t, out_shape.rt * TILE, out_shape.ct * TILE)
    if tuple(out.shape[1:]) != expected:
        raise NetlistError(f"graphs.{name}", f"computed output shape {list(out.shape[1:])} differs from the "
                                             f"op's declared (t, rows, cols) {list(expected)}")
    if out.shape[0] != n:  # every operand was a constant (batch dimension 1)
        out = out.expand(n, *expected)
    if numerics is None:
        return out
    return formats.quantize(out, numerics.out_df, in_place=_fresh(out, inputs))


def source_register(x: torch.Tensor, df: DataFormat) -> torch.Tensor:
    """``x``, unpacked from ``df``, as the math engine sees it in a source register (SrcA/SrcB).

    The registers hold 19 bits (sign, 8 exponent bits, 10 fraction bits): the unpacker turns Float32 data
    into TF32 by dropping the low 13 mantissa bits (spec §4.5; TT-Buda's golden quantises Wormhole Float32
    inputs to TF32 the same way). Every compute op reads its operands there — an SFPU op's operand reaches
    Dest through SrcA — so a Float32 operand keeps 11 significant bits (integers exact up to 2**11), while
    Dest and a Float32 output keep all 24. Every other format already fits the registers.

    The golden applies it only when asked (``golden_tf32_operands``, ``PYBUDA_GOLDEN_TF32_OPERANDS=1``): at Float32
    the compiler's exact data movement (:mod:`pybuda.passes.lowered.exact_pickers`), its integer-on-device
    rules (2**24 on Wormhole) and device-side Float32 optimizers assume operands read whole, which with TF32
    reads they are not; by default the golden shows what those rules promise, with the flag what the chip does."""
    return formats.quantize_tf32(x) if df == DataFormat.Float32 else x


def _fresh(out: torch.Tensor, inputs: List[torch.Tensor]) -> bool:
    """True when ``out`` shares memory with none of the op's operands: the kernel computed it into a
    tensor of its own (the usual case), so packing may round it where it is. An op that hands an operand
    through (a copy op, a fused op whose output is an input) must not round its producer's value."""
    storage = out.untyped_storage().data_ptr()
    return all(x.untyped_storage().data_ptr() != storage for x in inputs)


def _run_fused(fused: nl.FusedOpDef, inputs: List[torch.Tensor], caches: List[Optional[Dict]],
               numerics: Optional[OpNumerics], approximate: bool = False) -> torch.Tensor:
    """Interpret a fused op's schedules: sub-ops read ``inputK`` / ``intermedK`` / ``dest`` and write
    ``intermedK`` / ``dest`` / ``output``. Sub-ops are elementwise, so they run on whole tensors.
    ``approximate``: the fused op's ``approximate_mode``, which its SFPU sub-ops run in (as in TT-Buda,
    where the attribute sits on the fused op, not on a scheduled op)."""
    buffers: Dict[str, torch.Tensor] = {f"input{i}": x for i, x in enumerate(inputs)}
    fast = numerics is None
    fidelity = None if fast else numerics.fidelity
    result: Optional[torch.Tensor] = None
    for schedule in fused.schedules:
        for sub in schedule:
            kind = nl.op_class(sub.type)
            xs, sub_caches, sub_dfs = [], [], []
            for k, src in enumerate(sub.inputs):
                sub_dfs.append(None if fast else numerics.in_df[int(src[5:])] if src.startswith("input") else
                               numerics.intermed_df if src.startswith("intermed") else None)
                tms = sub.input_tms.get(k, ())
                cache = None
                if src.startswith("input") and caches[int(src[5:])] is not None:
                    # A constant operand: its TM'd value and fidelity pieces are kept per sub-op input.
                    cache = caches[int(src[5:])].setdefault(("fused", sub.name, k), {})
                x = buffers[src]
                if not fast and numerics.tf32_operands and (src.startswith("intermed") or
                                                            (src == "dest" and kind == "binary")):
                    # An intermediate buffer is unpacked again; Dest reused by an FPU op moves to a source register.
                    x = source_register(x, numerics.intermed_df if src.startswith("intermed") else DataFormat.Float32)
                if tms:
                    x = golden_ops._cached(cache, "value", lambda x=x, tms=tms: apply_tms(x, tms))
                xs.append(x)
                sub_caches.append(cache)
            if kind == "binary":
                y = golden_ops.binary(sub.type, xs[0], xs[1], fidelity, sub_caches, sub_dfs)
            elif kind == "unary":
                sub_attrs = {**sub.attributes, "approximate_mode": True} if approximate else sub.attributes
                y = golden_ops.unary(sub.type, xs[0], sub_attrs)
            else:
                raise NetlistError(f"fused_ops.{fused.id}.{sub.name}", f"golden supports elementwise sub-ops "
                                                                     f"in fused ops, not '{sub.type}'")
            y = golden_ops.apply_relu(y, sub.attributes)
            if sub.output.startswith("intermed") and not fast:
                y = formats.quantize(y, numerics.intermed_df)
            if sub.output == "output":
                result = y
            buffers[sub.output] = y
    if result is None:
        raise NetlistError(f"fused_ops.{fused.id}", "no sub-op writes 'output'")
    return result


def _alike_as_broadcast(x: torch.Tensor, tms: Sequence[Any]) -> torch.Tensor:
    """A constant operand whose TMs only broadcast, as a stride-0 view along each broadcast r/c axis whose
    rows (columns) are all alike — a bias or a layer-norm weight the host stored with its row repeated —
    so that its broadcast stays a view and the cached operand costs one row, not the whole block."""
    if not tms or not all(isinstance(tm, (Broadcast, TileBroadcast)) for tm in tms):
        return x
    for dim in {-2 if tm.dim == "r" else -1 for tm in tms if tm.dim in ("r", "c")}:
        first = x.narrow(dim, 0, 1)
        if x.shape[dim] > 1 and x.stride(dim) != 0 and torch.equal(x, first.expand(x.shape)):
            x = first.expand(x.shape)
    return x


def _last_reads(graph: nl.GraphDef, order: Sequence[str], kept: Mapping[str, str]) -> Dict[str, List[str]]:
    """``{op: [values it is the last reader of]}`` over the ops of ``graph`` run in ``order``, for the
    values that may be dropped then: the outputs of ops that feed no queue (``kept``: op -> queue)."""
    last: Dict[str, str] = {}
    for reader in order:
        for name in graph.ops[reader].inputs:
            if name in graph.ops and name not in kept:
                last[name] = reader
    dropped: Dict[str, List[str]] = {}
    for name, reader in last.items():
        dropped.setdefault(reader, []).append(name)
    return dropped


def _topological(graph: nl.GraphDef) -> List[str]:
    """Ops of a graph in dependency order (stable: netlist order among ready ops)."""
    names = list(graph.ops)
    done: Dict[str, bool] = {}
    order: List[str] = []
    pending = set(names)
    while pending:
        progressed = False
        for name in names:
            if name in done:
                continue
            deps = [i for i in graph.ops[name].inputs if i in graph.ops]
            if all(d in done for d in deps):
                done[name] = True
                order.append(name)
                pending.discard(name)
                progressed = True
        if not progressed:
            raise NetlistError(f"graphs.{graph.name}", f"ops form a cycle: {sorted(pending)}")
    return order
