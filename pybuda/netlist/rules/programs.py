"""Netlist rules: programs (instructions, variables, loops, queue settings).

Each ``@rule`` function yields ``(key path, message)`` pairs; :mod:`pybuda.netlist.validate` runs them in
registration order (this module is imported in its place in that order).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

from pybuda.netlist.model import (
    AllocateQueue, DeallocateQueue, EndLoop, Execute, Loop, Param, StaticVar, VARINST_ARITY, Var, VarInst,
)
from pybuda.netlist.rules.framework import Ctx, rule


def _instructions(ctx: Ctx):
    """(program index, program, instruction index, instruction, path) for every instruction."""
    for pi, prog in enumerate(ctx.netlist.programs):
        for j, instr in enumerate(prog.instructions):
            yield pi, prog, j, instr, f"programs[{pi}].{prog.name}[{j}]"


def _opcode(instr) -> str:
    return {Param: "param", Var: "var", StaticVar: "staticvar", VarInst: "varinst", Loop: "loop",
            EndLoop: "endloop", Execute: "execute", AllocateQueue: "allocate_queue",
            DeallocateQueue: "deallocate_queue"}.get(type(instr), "?")


def _executes(ctx: Ctx):
    for pi, prog, j, instr, path in _instructions(ctx):
        if isinstance(instr, Execute):
            yield prog, instr, f"{path}.execute"


@rule
def program_names_unique(ctx: Ctx):
    """Program names are unique."""
    seen: Set[str] = set()
    for pi, prog in enumerate(ctx.netlist.programs):
        if prog.name in seen:
            yield f"programs[{pi}].{prog.name}", "duplicate program name"
        seen.add(prog.name)


@rule
def program_param_first(ctx: Ctx):
    """param, if present, is the first instruction (§1.5)."""
    for pi, prog, j, instr, path in _instructions(ctx):
        if isinstance(instr, Param) and j != 0:
            yield f"{path}.param", "param must be the first instruction of the program"


def _declared(prog) -> Dict[str, Tuple[str, Optional[int]]]:
    """name -> (kind, initial value) of every declared variable of a program."""
    out: Dict[str, Tuple[str, Optional[int]]] = {}
    for instr in prog.instructions:
        if isinstance(instr, Param):
            for name in instr.names:
                out.setdefault(name, ("param", None))
        elif isinstance(instr, (Var, StaticVar)):
            for name, value in instr.values.items():
                out.setdefault(name, (_opcode(instr), value))
    return out


@rule
def program_var_declared_once(ctx: Ctx):
    """A variable is declared once per program (param, var or staticvar) and is named $something (§1.5)."""
    for pi, prog in enumerate(ctx.netlist.programs):
        seen: Set[str] = set()
        for j, instr in enumerate(prog.instructions):
            names = instr.names if isinstance(instr, Param) else (
                list(instr.values) if isinstance(instr, (Var, StaticVar)) else [])
            for name in names:
                path = f"programs[{pi}].{prog.name}[{j}].{_opcode(instr)}"
                if not isinstance(name, str) or not name.startswith("$"):
                    yield path, f"variable names start with $, got {name!r}"
                elif name in seen:
                    yield path, f"variable {name} is declared twice"
                seen.add(name)


def _used_variables(instr) -> List[Tuple[str, object]]:
    """(sub-path, operand) of every operand an instruction reads or writes."""
    out: List[Tuple[str, object]] = []
    if isinstance(instr, Loop):
        out.append(("loop", instr.count))
    elif isinstance(instr, VarInst):
        out.append(("varinst[0]", instr.out))
        out += [(f"varinst[{k + 2}]", a) for k, a in enumerate(instr.args)]
    elif isinstance(instr, Execute):
        for q, s in instr.queue_settings.items():
            for key, value in vars(s).items():
                out.append((f"execute.queue_settings.{q}.{key}", value))
    return out


@rule
def program_undeclared_variable(ctx: Ctx):
    """Every $variable an instruction uses is declared in the program."""
    for pi, prog in enumerate(ctx.netlist.programs):
        declared = _declared(prog)
        for j, instr in enumerate(prog.instructions):
            for sub, value in _used_variables(instr):
                if isinstance(value, str) and value.startswith("$") and value not in declared:
                    yield f"programs[{pi}].{prog.name}[{j}].{sub}", f"variable {value} is not declared"


@rule
def program_loop_balance(ctx: Ctx):
    """Every loop has a matching endloop and vice versa."""
    for pi, prog in enumerate(ctx.netlist.programs):
        open_loops: List[int] = []
        for j, instr in enumerate(prog.instructions):
            if isinstance(instr, Loop):
                open_loops.append(j)
            elif isinstance(instr, EndLoop):
                if not open_loops:
                    yield f"programs[{pi}].{prog.name}[{j}]", "endloop without a loop"
                else:
                    open_loops.pop()
        for j in open_loops:
            yield f"programs[{pi}].{prog.name}[{j}].loop", "loop without an endloop"


@rule
def program_loop_count(ctx: Ctx):
    """A loop count is >= 1: an immediate, or a variable that starts >= 1 unless a param or varinst sets it."""
    for pi, prog in enumerate(ctx.netlist.programs):
        declared = _declared(prog)
        assigned = {i.out for i in prog.instructions if isinstance(i, VarInst)}
        for j, instr in enumerate(prog.instructions):
            if not isinstance(instr, Loop):
                continue
            path = f"programs[{pi}].{prog.name}[{j}].loop"
            count = instr.count
            if isinstance(count, bool) or (isinstance(count, int) and count < 1):
                yield path, f"loop count must be >= 1, got {count!r}"
            elif isinstance(count, str) and count in declared and count not in assigned:
                kind, value = declared[count]
                if kind != "param" and value is not None and value < 1:
                    yield path, f"loop count {count} is {value} and never set; it must be >= 1"


@rule
def program_varinst(ctx: Ctx):
    """varinst: a known opcode (set, add, mul, inc, incwrap) with its number of operands (§1.5)."""
    for pi, prog, j, instr, path in _instructions(ctx):
        if not isinstance(instr, VarInst):
            continue
        if instr.op not in VARINST_ARITY:
            yield f"{path}.varinst[1]", f"unknown varinst opcode {instr.op!r}; expected {list(VARINST_ARITY)}"
            continue
        if len(instr.args) != VARINST_ARITY[instr.op]:
            yield f"{path}.varinst", f"{instr.op} takes {VARINST_ARITY[instr.op]} operand(s), got {len(instr.args)}"
        if not isinstance(instr.out, str) or not instr.out.startswith("$"):
            yield f"{path}.varinst[0]", f"the output must be a $variable, got {instr.out!r}"
        for k, arg in enumerate(instr.args):
            if isinstance(arg, bool) or not (isinstance(arg, int) or (isinstance(arg, str) and arg.startswith("$"))):
                yield f"{path}.varinst[{k + 2}]", f"operand must be an integer or a $variable, got {arg!r}"


@rule
def execute_graph_exists(ctx: Ctx):
    """execute names a graph of the netlist."""
    for prog, instr, path in _executes(ctx):
        if instr.graph_name not in ctx.netlist.graphs:
            yield f"{path}.graph_name", f"graph {instr.graph_name!r} does not exist"


@rule
def queue_setting_names(ctx: Ctx):
    """Every queue_settings key is a queue, and an IO the executed graph reads or writes (§1.5)."""
    for prog, instr, path in _executes(ctx):
        if instr.graph_name not in ctx.netlist.graphs:
            continue
        reads, writes = ctx.netlist.graph_io(instr.graph_name)
        for q in instr.queue_settings:
            spath = f"{path}.queue_settings.{q}"
            if q not in ctx.netlist.queues:
                yield spath, f"{q!r} is not a queue"
            elif q not in reads and q not in writes:
                yield spath, f"queue {q!r} is not read or written by graph {instr.graph_name}"


@rule
def queue_setting_pointers(ctx: Ctx):
    """type queue sets rd_ptr_local and rd_ptr_global but not wr_ptr_global; a ram sets rd_ptr_global and
    wr_ptr_global but not rd_ptr_local (§1.5)."""
    for prog, instr, path in _executes(ctx):
        for q, s in instr.queue_settings.items():
            queue = ctx.netlist.queues.get(q)
            if queue is None:
                continue
            spath = f"{path}.queue_settings.{q}"
            if queue.type == "queue":
                if s.wr_ptr_global is not None:
                    yield f"{spath}.wr_ptr_global", "wr_ptr_global is for rams only"
                for key in ("rd_ptr_local", "rd_ptr_global"):
                    if getattr(s, key) is None:
                        yield f"{spath}.{key}", f"a type: queue must set {key}"
            elif queue.type == "ram":
                if s.rd_ptr_local is not None:
                    yield f"{spath}.rd_ptr_local", "rd_ptr_local is for type: queue only"
                for key in ("rd_ptr_global", "wr_ptr_global"):
                    if getattr(s, key) is None:
                        yield f"{spath}.{key}", f"a ram must set {key}"


@rule
def queue_setting_autoinc(ctx: Ctx):
    """If rd_ptr_autoinc and global_rdptr_autoinc are both non-zero they are equal (§1.5)."""
    for prog, instr, path in _executes(ctx):
        for q, s in instr.queue_settings.items():
            queue = ctx.netlist.queues.get(q)
            if queue is None:
                continue
            local, glob, _ = s.autoincs(queue.type)
            if local != 0 and glob != 0 and local != glob:
                yield (f"{path}.queue_settings.{q}.global_rdptr_autoinc",
                       f"rd_ptr_autoinc {local} and global_rdptr_autoinc {glob} must match when both are set")


@rule
def queue_setting_epilogue(ctx: Ctx):
    """epilogue is not allowed on an op-fed type: queue (§1.5)."""
    for prog, instr, path in _executes(ctx):
        for q, s in instr.queue_settings.items():
            queue = ctx.netlist.queues.get(q)
            if queue is not None and queue.type == "queue" and not queue.is_host_fed and s.epilogue is True:
                yield f"{path}.queue_settings.{q}.epilogue", "epilogue is not supported on an op-fed type: queue"


@rule
def queue_setting_zero(ctx: Ctx):
    """zero requires prologue (§1.5)."""
    for prog, instr, path in _executes(ctx):
        for q, s in instr.queue_settings.items():
            if s.zero is True and s.prologue is not True and not isinstance(s.prologue, str):
                yield f"{path}.queue_settings.{q}.zero", "zero requires prologue: true"


@rule
def execute_host_queues_listed(ctx: Ctx):
    """Every HOST-fed type: queue the graph reads appears in the execute's queue_settings (§1.5)."""
    for prog, instr, path in _executes(ctx):
        if instr.graph_name not in ctx.netlist.graphs:
            continue
        reads, _ = ctx.netlist.graph_io(instr.graph_name)
        for q in reads:
            queue = ctx.netlist.queues[q]
            if queue.type == "queue" and queue.input == "HOST" and q not in instr.queue_settings:
                yield f"{path}.queue_settings", f"host-fed queue {q!r} read by graph {instr.graph_name} has no settings"


@rule
def execute_gradient_queues_listed(ctx: Ctx):
    """A queue written by a gradient op of the graph appears in the execute's queue_settings."""
    for prog, instr, path in _executes(ctx):
        graph = ctx.netlist.graphs.get(instr.graph_name)
        if graph is None:
            continue
        for op in graph.ops.values():
            if not op.gradient_op:
                continue
            for q in ctx.netlist.queues_fed_by(op.name):
                if q.name not in instr.queue_settings:
                    yield f"{path}.queue_settings", f"gradient op {op.name!r} writes {q.name!r}, which needs settings"


@rule
def execute_streaming_entries(ctx: Ctx):
    """A streamed queue (no prologue/epilogue, rd_ptr_autoinc != 0, global_rdptr_autoinc == 0) has
    entries >= input_count and a multiple of it (golden execute, §1.5)."""
    for prog, instr, path in _executes(ctx):
        graph = ctx.netlist.graphs.get(instr.graph_name)
        if graph is None or not isinstance(graph.input_count, int) or graph.input_count < 1:
            continue
        reads, _ = ctx.netlist.graph_io(instr.graph_name)
        n = graph.input_count
        for q in reads:
            s = instr.queue_settings.get(q)
            queue = ctx.netlist.queues[q]
            if s is None or s.prologue is True or s.epilogue is True or not isinstance(queue.entries, int) \
                    or queue.entries < 1:
                continue
            local, glob, _ = s.autoincs(queue.type)
            if local == 0 or glob != 0 or isinstance(local, str) or isinstance(glob, str):
                continue
            if queue.entries < n or queue.entries % n:
                yield (f"{path}.queue_settings.{q}", f"streams {queue.entries} entries, which must be >= and a "
                                                     f"multiple of graph {graph.name}'s input_count {n}")


@rule
def allocate_queue_names(ctx: Ctx):
    """allocate_queue / deallocate_queue name existing queues (§1.5)."""
    for pi, prog, j, instr, path in _instructions(ctx):
        if isinstance(instr, (AllocateQueue, DeallocateQueue)):
            for k, name in enumerate(instr.names):
                if name not in ctx.netlist.queues:
                    yield f"{path}.{_opcode(instr)}[{k}]", f"queue {name!r} does not exist"
