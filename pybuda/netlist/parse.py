"""Read netlist YAML into a :class:`~pybuda.netlist.model.Netlist`, strictly.

Every key the backend parser does not know is an error, at any depth (netlist_backend_spec §1); so
are wrong value types, missing required fields and duplicate keys. Errors are
:class:`pybuda.errors.NetlistError` naming the YAML key path, e.g. ``graphs.fwd0.mm0.ublock`` or
``programs[0].run_fwd[4].execute.queue_settings.act.rd_ptr_local``.

Parsing checks form; :func:`pybuda.netlist.validate` checks meaning (shapes, placement, programs).
The top-level ``test-config`` and ``performance-check`` sections of BBE test netlists are accepted and
dropped, as the backend does; any other top-level key is an error.

The parser is a security boundary (device images and users hand us YAML): anchors, aliases, tags beyond
the standard scalars and nesting deeper than ``MAX_YAML_DEPTH`` are refused from the event stream before
anything is composed, every size is bounded (:mod:`pybuda.netlist.limits`) before anything downstream
enumerates or allocates, and error messages quote only short prefixes of values.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import yaml

from pybuda.arch.descriptor import NETLIST_ARCH_NAMES
from pybuda.errors import NetlistError, quote
from pybuda.netlist.limits import size_problems
from pybuda.netlist.attributes import FUSED_SUB_OP_ATTRIBUTES, check_attribute
from pybuda.netlist.model import (
    AllocateQueue, DeallocateQueue, EndLoop, Execute, FusedOpDef, FusedSubOp, GraphDef, Loop, Netlist, NetlistOp,
    Param, Program, QueueDef, QueueSetting, StaticVar, VARINST_ARITY, Var, VarInst,
)
from pybuda.netlist.tms import TM, InputPad, InputUnpad, TMError, as_tms
from pybuda.dtypes import DataFormat, MathFidelity

IGNORED_TOP_LEVEL = ("test-config", "performance-check")
_DATA_FORMATS = {m.name: m for m in DataFormat if m != DataFormat.Invalid}
_FIDELITIES = {"LoFi": MathFidelity.LoFi, "HiFi2": MathFidelity.HiFi2, "HiFi2_A": MathFidelity.HiFi2,
               "HiFi2_B": MathFidelity.HiFi2_B, "HiFi3": MathFidelity.HiFi3, "HiFi4": MathFidelity.HiFi4}
_INPUT_KEY = re.compile(r"input_(\d+)_(tms|pad|unpad)")


# ---------------------------------------------------------------------------------------------------
# Paths and scalar readers
# ---------------------------------------------------------------------------------------------------


def key_path(base: str, key: Any) -> str:
    """``base.key`` (or ``key`` at the top)."""
    return f"{base}.{key}" if base else str(key)


def index_path(base: str, index: int) -> str:
    """``base[index]``."""
    return f"{base}[{index}]"


def _fail(path: str, message: str) -> NetlistError:
    return NetlistError(path, message)


def _map(v: Any, path: str) -> Dict[Any, Any]:
    if not isinstance(v, dict):
        raise _fail(path, f"expected a map, got {_kind(v)}")
    return v


def _list(v: Any, path: str) -> List[Any]:
    if not isinstance(v, list):
        raise _fail(path, f"expected a list, got {_kind(v)}")
    return v


def _int(v: Any, path: str, low: Optional[int] = None) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise _fail(path, f"expected an integer, got {_kind(v)} {quote(v)}")
    if low is not None and v < low:
        raise _fail(path, f"must be >= {low}, got {v}")
    return v


def _num(v: Any, path: str) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise _fail(path, f"expected a number, got {_kind(v)} {quote(v)}")
    return float(v)


def _bool(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise _fail(path, f"expected true or false, got {_kind(v)} {quote(v)}")
    return v


def _str(v: Any, path: str) -> str:
    if not isinstance(v, str) or not v:
        raise _fail(path, f"expected a name, got {_kind(v)} {quote(v)}")
    return v


def _choice(v: Any, path: str, choices: Sequence[str]) -> str:
    if not isinstance(v, str) or v not in choices:
        raise _fail(path, f"expected one of {list(choices)}, got {quote(v)}")
    return v


def _pair(v: Any, path: str, low: Optional[int] = None) -> Tuple[int, int]:
    items = _list(v, path)
    if len(items) != 2:
        raise _fail(path, f"expected 2 values [a, b], got {len(items)}")
    return (_int(items[0], index_path(path, 0), low), _int(items[1], index_path(path, 1), low))


def _int_list(v: Any, path: str, low: Optional[int] = None) -> Tuple[int, ...]:
    return tuple(_int(x, index_path(path, i), low) for i, x in enumerate(_list(v, path)))


def _names(v: Any, path: str) -> Tuple[str, ...]:
    return tuple(_str(x, index_path(path, i)) for i, x in enumerate(_list(v, path)))


def _df(v: Any, path: str) -> DataFormat:
    if not isinstance(v, str) or v not in _DATA_FORMATS:
        raise _fail(path, f"unknown data format {quote(v)}; expected one of {list(_DATA_FORMATS)}")
    return _DATA_FORMATS[v]


def _fidelity(v: Any, path: str) -> MathFidelity:
    if not isinstance(v, str) or v not in _FIDELITIES:
        raise _fail(path, f"unknown math fidelity {quote(v)}; expected one of {list(_FIDELITIES)}")
    return _FIDELITIES[v]


def _device(v: Any, path: str) -> Union[int, Tuple[int, ...]]:
    if isinstance(v, list):
        if not v:
            raise _fail(path, "target_device list must not be empty")
        return _int_list(v, path, 0)
    return _int(v, path, 0)


def _var_name(v: Any, path: str) -> str:
    if not isinstance(v, str) or not v.startswith("$") or len(v) < 2:
        raise _fail(path, f"expected a $variable name, got {quote(v)}")
    return v


def _operand(v: Any, path: str) -> Union[int, str]:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    return _var_name(v, path)


def _flag(v: Any, path: str) -> Union[bool, str]:
    if isinstance(v, bool):
        return v
    if v in ("true", "false"):
        return v == "true"
    if isinstance(v, str) and v.startswith("$"):
        return v
    raise _fail(path, f"expected true, false or a $variable, got {quote(v)}")


def _kind(v: Any) -> str:
    return {dict: "a map", list: "a list", str: "a string", bool: "a bool", int: "an integer",
            float: "a number", type(None): "nothing"}.get(type(v), type(v).__name__)


def _check_keys(obj: Dict[Any, Any], path: str, allowed: Sequence[str], required: Sequence[str] = ()) -> None:
    for key in obj:
        if key not in allowed:
            raise _fail(key_path(path, key), f"unknown key; expected one of {list(allowed)}")
    for key in required:
        if key not in obj:
            raise _fail(key_path(path, key), "required key is missing")


# ---------------------------------------------------------------------------------------------------
# TMs
# ---------------------------------------------------------------------------------------------------


def parse_tms(v: Any, path: str) -> Tuple[TM, ...]:
    """A TM list (``input_N_tms`` / ``input_tms``), read by :func:`pybuda.netlist.tms.as_tms`; errors name
    the YAML key path. ``broadcast: {r: 2, c: 3}`` gives two Broadcasts."""
    try:
        return as_tms(_list(v, path))
    except TMError as e:
        raise _fail(path + e.path, e.reason) from None


# ---------------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------------

_QUEUE_KEYS = ("input", "type", "entries", "grid_size", "t", "mblock", "ublock", "ublock_order", "df",
               "target_device", "loc", "dram", "host", "read_ports", "write_ports", "layout", "alias", "tile_dim",
               "input_tms")
_QUEUE_REQUIRED = ("input", "type", "entries", "grid_size", "t", "mblock", "ublock", "df", "target_device", "loc")


def _allocations(v: Any, path: str, bare_ok: bool) -> Tuple[Tuple[int, int], ...]:
    out = []
    for i, item in enumerate(_list(v, path)):
        ipath = index_path(path, i)
        if bare_ok and not isinstance(item, list):
            out.append((0, _int(item, ipath, 0)))  # a bare host address means channel 0
        else:
            out.append(_pair(item, ipath, 0))
    return tuple(out)


def parse_queue(name: str, v: Any, path: str) -> QueueDef:
    """One entry of ``queues:``."""
    q = _map(v, path)
    _check_keys(q, path, _QUEUE_KEYS, _QUEUE_REQUIRED)
    p = lambda k: key_path(path, k)  # noqa: E731
    return QueueDef(
        name=name,
        input=_str(q["input"], p("input")),
        type=_choice(q["type"], p("type"), ("queue", "ram")),
        entries=_int(q["entries"], p("entries")),
        grid_size=_pair(q["grid_size"], p("grid_size")),
        t=_int(q["t"], p("t")),
        mblock=_pair(q["mblock"], p("mblock")),
        ublock=_pair(q["ublock"], p("ublock")),
        ublock_order=_choice(q.get("ublock_order", "r"), p("ublock_order"), ("r", "c")),
        df=_df(q["df"], p("df")),
        target_device=_device(q["target_device"], p("target_device")),
        loc=_choice(q["loc"], p("loc"), ("dram", "host")),
        dram=_allocations(q["dram"], p("dram"), False) if "dram" in q else None,
        host=_allocations(q["host"], p("host"), True) if "host" in q else None,
        read_ports=_int_list(q["read_ports"], p("read_ports")) if "read_ports" in q else None,
        write_ports=_int_list(q["write_ports"], p("write_ports")) if "write_ports" in q else None,
        layout=_choice(q["layout"], p("layout"), ("tilized", "flat")) if "layout" in q else None,
        alias=_str(q["alias"], p("alias")) if "alias" in q else None,
        tile_dim=_pair(q["tile_dim"], p("tile_dim")) if "tile_dim" in q else None,
        input_tms=parse_tms(q["input_tms"], p("input_tms")) if "input_tms" in q else (),
    )


_OP_KEYS = ("type", "grid_loc", "grid_size", "grid_transpose", "inputs", "in_df", "out_df", "intermed_df", "acc_df",
            "math_fidelity", "t", "mblock", "ublock", "ublock_order", "tile_dim", "buf_size_mb",
            "input_buf_min_size_tiles", "input_dram_io_buf_size_tiles", "overlay_size", "untilize_output",
            "gradient_op", "forked_dram_inputs", "attributes")
_OP_REQUIRED = ("type", "grid_size", "inputs", "in_df", "out_df", "intermed_df", "acc_df", "math_fidelity", "t",
                "mblock", "ublock", "buf_size_mb")


def _attributes(v: Any, path: str, op_type: Optional[str], allowed: Optional[frozenset] = None) -> Dict[str, Any]:
    attrs = _map(v, path)
    out: Dict[str, Any] = {}
    for key, value in attrs.items():
        apath = key_path(path, key)
        if not isinstance(key, str) or (allowed is not None and key not in allowed):
            raise _fail(apath, "unknown attribute" + (f"; expected one of {sorted(allowed)}" if allowed else ""))
        problem = check_attribute(key, value, None)
        if problem:
            raise _fail(apath, problem)
        out[key] = tuple(value) if isinstance(value, list) else value
    return out


def parse_op(name: str, v: Any, path: str) -> NetlistOp:
    """One op of a graph."""
    o = _map(v, path)
    extra = [k for k in o if isinstance(k, str) and _INPUT_KEY.fullmatch(k)]
    _check_keys({k: None for k in o if k not in extra}, path, _OP_KEYS, ())
    _check_keys(o, path, tuple(o), _OP_REQUIRED)
    p = lambda k: key_path(path, k)  # noqa: E731
    op_type = _str(o["type"], p("type"))
    input_tms: Dict[int, Tuple[TM, ...]] = {}
    input_pad: Dict[int, InputPad] = {}
    input_unpad: Dict[int, InputUnpad] = {}
    for key in extra:
        m = _INPUT_KEY.fullmatch(key)
        index, kind = int(m.group(1)), m.group(2)
        if kind == "tms":
            input_tms[index] = parse_tms(o[key], p(key))
        elif kind == "pad":
            pad = _map(o[key], p(key))
            _check_keys(pad, p(key), ("rt", "ct", "pad_value"), ("rt", "ct"))
            input_pad[index] = InputPad(rt=_int(pad["rt"], key_path(p(key), "rt"), 0),
                                        ct=_int(pad["ct"], key_path(p(key), "ct"), 0),
                                        pad_value=_num(pad.get("pad_value", 0.0), key_path(p(key), "pad_value")))
        else:
            unpad = _map(o[key], p(key))
            _check_keys(unpad, p(key), ("rt", "ct"), ("rt", "ct"))
            input_unpad[index] = InputUnpad(rt=_int(unpad["rt"], key_path(p(key), "rt"), 0),
                                            ct=_int(unpad["ct"], key_path(p(key), "ct"), 0))
    forked: List[Tuple[str, str]] = []
    if "forked_dram_inputs" in o:
        for i, item in enumerate(_list(o["forked_dram_inputs"], p("forked_dram_inputs"))):
            ipath = index_path(p("forked_dram_inputs"), i)
            for queue, producer in _map(item, ipath).items():
                forked.append((_str(queue, ipath), _str(producer, key_path(ipath, queue))))
    return NetlistOp(
        name=name,
        type=op_type,
        grid_loc=_pair(o["grid_loc"], p("grid_loc")) if "grid_loc" in o else None,
        grid_size=_pair(o["grid_size"], p("grid_size")),
        grid_transpose=_bool(o.get("grid_transpose", False), p("grid_transpose")),
        inputs=_names(o["inputs"], p("inputs")),
        in_df=tuple(_df(d, index_path(p("in_df"), i)) for i, d in enumerate(_list(o["in_df"], p("in_df")))),
        out_df=_df(o["out_df"], p("out_df")),
        intermed_df=_df(o["intermed_df"], p("intermed_df")),
        acc_df=_df(o["acc_df"], p("acc_df")),
        math_fidelity=_fidelity(o["math_fidelity"], p("math_fidelity")),
        t=_int(o["t"], p("t")),
        mblock=_pair(o["mblock"], p("mblock")),
        ublock=_pair(o["ublock"], p("ublock")),
        ublock_order=_choice(o.get("ublock_order", "r"), p("ublock_order"), ("r", "c")),
        tile_dim=_pair(o["tile_dim"], p("tile_dim")) if "tile_dim" in o else None,
        buf_size_mb=_int(o["buf_size_mb"], p("buf_size_mb")),
        input_buf_min_size_tiles=(_int_list(o["input_buf_min_size_tiles"], p("input_buf_min_size_tiles"))
                                  if "input_buf_min_size_tiles" in o else None),
        input_dram_io_buf_size_tiles=(_int_list(o["input_dram_io_buf_size_tiles"], p("input_dram_io_buf_size_tiles"))
                                      if "input_dram_io_buf_size_tiles" in o else None),
        overlay_size=_int(o["overlay_size"], p("overlay_size")) if "overlay_size" in o else None,
        untilize_output=_bool(o.get("untilize_output", False), p("untilize_output")),
        gradient_op=_bool(o.get("gradient_op", False), p("gradient_op")),
        forked_dram_inputs=tuple(forked),
        input_tms=input_tms,
        input_pad=input_pad,
        input_unpad=input_unpad,
        attributes=_attributes(o["attributes"], p("attributes"), op_type) if "attributes" in o else {},
    )


def parse_graph(name: str, v: Any, path: str) -> GraphDef:
    """One entry of ``graphs:``: the reserved keys, then ops."""
    g = _map(v, path)
    for key in ("target_device", "input_count"):
        if key not in g:
            raise _fail(key_path(path, key), "required key is missing")
    ops: Dict[str, NetlistOp] = {}
    for key, value in g.items():
        if key in ("target_device", "input_count"):
            continue
        op_name = _str(key, key_path(path, key)) if not isinstance(key, str) else key
        ops[op_name] = parse_op(op_name, value, key_path(path, op_name))
    return GraphDef(name=name, target_device=_device(g["target_device"], key_path(path, "target_device")),
                    input_count=_int(g["input_count"], key_path(path, "input_count")), ops=ops)


_SETTING_FLAGS = ("prologue", "epilogue", "zero", "read_only")
_SETTING_OPERANDS = ("rd_ptr_local", "rd_ptr_global", "wr_ptr_global", "rd_ptr_autoinc", "global_rdptr_autoinc",
                     "global_wrptr_autoinc")


def parse_queue_setting(v: Any, path: str) -> QueueSetting:
    """One entry of an execute's ``queue_settings``."""
    s = _map(v, path)
    _check_keys(s, path, _SETTING_FLAGS + _SETTING_OPERANDS)
    kwargs: Dict[str, Any] = {}
    for key, value in s.items():
        kwargs[key] = (_flag if key in _SETTING_FLAGS else _operand)(value, key_path(path, key))
    return QueueSetting(**kwargs)


def _var_decl(v: Any, path: str) -> Tuple[Dict[str, int], bool]:
    if isinstance(v, list):
        return {_var_name(x, index_path(path, i)): 0 for i, x in enumerate(v)}, True
    if isinstance(v, dict):
        return {_var_name(k, key_path(path, k)): _int(x, key_path(path, k)) for k, x in v.items()}, False
    raise _fail(path, f"variables are declared as a list or a map, got {_kind(v)}")


def parse_instruction(v: Any, path: str) -> Any:
    """One program instruction."""
    if isinstance(v, str):
        if v == "endloop":
            return EndLoop()
        raise _fail(path, f"only endloop may be a bare instruction, got {quote(v)}")
    instr = _map(v, path)
    if len(instr) != 1:
        raise _fail(path, f"an instruction is a map with one key, got {quote(list(instr))}")
    (opcode, arg), = instr.items()
    ipath = key_path(path, opcode)
    if opcode == "param":
        return Param(names=tuple(_var_name(x, index_path(ipath, i)) for i, x in enumerate(_list(arg, ipath))))
    if opcode in ("var", "staticvar"):
        values, as_list = _var_decl(arg, ipath)
        return (Var if opcode == "var" else StaticVar)(values=values, as_list=as_list)
    if opcode == "varinst":
        items = _list(arg, ipath)
        if len(items) < 2:
            raise _fail(ipath, "varinst needs [$out, opcode, args...]")
        out = _var_name(items[0], index_path(ipath, 0))
        op = _choice(items[1], index_path(ipath, 1), tuple(VARINST_ARITY))
        args = tuple(_operand(x, index_path(ipath, i + 2)) for i, x in enumerate(items[2:]))
        return VarInst(out=out, op=op, args=args)
    if opcode == "loop":
        return Loop(count=_operand(arg, ipath))
    if opcode == "execute":
        e = _map(arg, ipath)
        _check_keys(e, ipath, ("graph_name", "queue_settings"), ("graph_name",))
        settings_path = key_path(ipath, "queue_settings")
        settings = {_str(q, settings_path): parse_queue_setting(s, key_path(settings_path, q))
                    for q, s in _map(e.get("queue_settings", {}) or {}, settings_path).items()}
        return Execute(graph_name=_str(e["graph_name"], key_path(ipath, "graph_name")), queue_settings=settings)
    if opcode in ("allocate_queue", "deallocate_queue"):
        names = _names(arg, ipath)
        return (AllocateQueue if opcode == "allocate_queue" else DeallocateQueue)(names=names)
    raise _fail(ipath, "unknown instruction; expected param, var, staticvar, varinst, loop, endloop, execute, "
                       "allocate_queue or deallocate_queue")


def parse_programs(v: Any, path: str) -> List[Program]:
    """The ``programs:`` list."""
    programs = []
    for i, entry in enumerate(_list(v, path)):
        ppath = index_path(path, i)
        entry = _map(entry, ppath)
        if len(entry) != 1:
            raise _fail(ppath, f"each program is a map with one key (its name), got {quote(list(entry))}")
        (name, body), = entry.items()
        name = _str(name, ppath)
        bpath = key_path(ppath, name)
        body = [] if body is None else _list(body, bpath)
        programs.append(Program(name=name, instructions=[parse_instruction(x, index_path(bpath, j))
                                                         for j, x in enumerate(body)]))
    return programs


_SUB_OP_KEYS = ("type", "inputs", "output", "mblock", "ublock", "pop", "pop_last", "zero_point", "attributes")


def parse_fused_sub_op(name: str, v: Any, path: str) -> FusedSubOp:
    """One scheduled op of a fused op."""
    s = _map(v, path)
    extra = [k for k in s if isinstance(k, str) and re.fullmatch(r"input_(\d+)_tms", k)]
    _check_keys({k: None for k in s if k not in extra}, path, _SUB_OP_KEYS)
    _check_keys(s, path, tuple(s), ("type", "inputs", "output", "mblock", "ublock"))
    p = lambda k: key_path(path, k)  # noqa: E731
    return FusedSubOp(
        name=name,
        type=_str(s["type"], p("type")),
        inputs=_names(s["inputs"], p("inputs")),
        output=_str(s["output"], p("output")),
        mblock=_pair(s["mblock"], p("mblock")),
        ublock=_pair(s["ublock"], p("ublock")),
        input_tms={int(re.fullmatch(r"input_(\d+)_tms", k).group(1)): parse_tms(s[k], p(k)) for k in extra},
        pop=_names(s["pop"], p("pop")) if "pop" in s else (),
        pop_last=_names(s["pop_last"], p("pop_last")) if "pop_last" in s else (),
        zero_point=_num(s["zero_point"], p("zero_point")) if "zero_point" in s else None,
        attributes=(_attributes(s["attributes"], p("attributes"), None, FUSED_SUB_OP_ATTRIBUTES)
                    if "attributes" in s else {}),
    )


def parse_fused_ops(v: Any, path: str) -> Dict[int, FusedOpDef]:
    """The ``fused_ops:`` section."""
    out: Dict[int, FusedOpDef] = {}
    for fid, body in _map(v, path).items():
        fpath = key_path(path, fid)
        if not isinstance(fid, int) or isinstance(fid, bool) or fid < 0:
            raise _fail(fpath, f"fused op ids are integers >= 0, got {quote(fid)}")
        f = _map(body, fpath)
        _check_keys(f, fpath, ("inputs", "intermediates", "schedules", "custom_kernel_path"),
                    ("inputs", "intermediates", "schedules"))
        spath = key_path(fpath, "schedules")
        schedules = []
        for i, sched in enumerate(_list(f["schedules"], spath)):
            sched_path = index_path(spath, i)
            subs = []
            for j, entry in enumerate(_list(sched, sched_path)):
                epath = index_path(sched_path, j)
                entry = _map(entry, epath)
                if len(entry) != 1:
                    raise _fail(epath, "each scheduled op is a map {name: {fields}}")
                (sub_name, fields), = entry.items()
                sub_name = _str(sub_name, epath)
                subs.append(parse_fused_sub_op(sub_name, fields, key_path(epath, sub_name)))
            schedules.append(subs)
        out[fid] = FusedOpDef(
            id=fid,
            inputs=_int(f["inputs"], key_path(fpath, "inputs"), 1),
            intermediates=_int(f["intermediates"], key_path(fpath, "intermediates"), 0),
            schedules=schedules,
            custom_kernel_path=(_str(f["custom_kernel_path"], key_path(fpath, "custom_kernel_path"))
                                if "custom_kernel_path" in f else None),
        )
    return out


def _parse_devices(v: Any, arch: Optional[str]) -> Tuple[Union[str, Tuple[str, ...]], Optional[str]]:
    d = _map(v, "devices")
    _check_keys(d, "devices", ("arch",), ("arch",))
    raw = d["arch"]

    def one(name: Any, path: str) -> str:
        if not isinstance(name, str) or name.lower() not in NETLIST_ARCH_NAMES:
            raise _fail(path, f"unknown arch {quote(name)}; expected one of {list(NETLIST_ARCH_NAMES)}")
        return name.lower()

    selected = arch.lower() if arch is not None else None
    if isinstance(raw, list):
        if not raw:
            raise _fail("devices.arch", "arch list must not be empty")
        names = tuple(one(x, index_path("devices.arch", i)) for i, x in enumerate(raw))
        if selected is not None and selected not in names:
            raise _fail("devices.arch", f"arch {quote(arch)} is not among the netlist's archs {list(names)}")
        return names, selected
    name = one(raw, "devices.arch")
    if selected is not None and selected != name:
        raise _fail("devices.arch", f"netlist is for {name}, not {arch}")
    return name, selected


# ---------------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------------


# libyaml's parser and composer when installed (about 10x faster than the pure-Python ones on large netlists).
_COMPOSE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: Deepest nesting of maps and lists a netlist may have (real ones stay under 10).
MAX_YAML_DEPTH = 32
#: Longest integer literal: Python refuses to convert ones over 4300 digits, and none is meaningful anyway.
_MAX_INT_DIGITS = 40
_Y = "tag:yaml.org,2002:"
#: Explicit tags a netlist may carry: the standard scalars and collections, which safe_load builds anyway.
_ALLOWED_TAGS = frozenset(_Y + t for t in ("str", "int", "float", "bool", "null", "map", "seq"))


def _where(event: Any) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _event_path(stack: List[List[Any]]) -> str:
    path = ""
    for frame in stack:
        if frame[0] == "seq":
            path = index_path(path, frame[1])
        elif not frame[2]:  # in value position: the key is known
            path = key_path(path, frame[1])
    return path or "<root>"


def _check_events(text: str) -> None:
    """Refuse anchors, aliases, non-standard tags and deep nesting from the YAML event stream.

    This runs before anything is composed or expanded, so an alias bomb ("billion laughs": a few
    hundred bytes whose aliases expand to 10^9 nodes) or a self-referencing alias costs one linear
    pass over the text. Aliases have no meaning in a netlist, so refusing them loses nothing.
    """
    # Frames: ["map", current key, expecting a key] or ["seq", index of the current item].
    stack: List[List[Any]] = []

    def done(key: Any) -> None:
        if stack:
            top = stack[-1]
            if top[0] == "seq":
                top[1] += 1
            elif top[2]:
                top[1], top[2] = key, False
            else:
                top[2] = True

    try:
        for event in yaml.parse(text, Loader=_COMPOSE_LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise NetlistError(_event_path(stack), f"YAML alias *{event.anchor} at {_where(event)}: "
                                                       "anchors and aliases are not allowed in a netlist")
            if isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
                if event.anchor is not None:
                    raise NetlistError(_event_path(stack), f"YAML anchor &{event.anchor} at {_where(event)}: "
                                                           "anchors and aliases are not allowed in a netlist")
                if event.tag is not None and event.tag not in _ALLOWED_TAGS:
                    raise NetlistError(_event_path(stack), f"YAML tag {event.tag} at {_where(event)} is not "
                                                           "allowed in a netlist")
            if isinstance(event, yaml.ScalarEvent):
                done(event.value if len(event.value) <= 200 else event.value[:200] + "...")
            elif isinstance(event, yaml.CollectionStartEvent):
                if len(stack) >= MAX_YAML_DEPTH:
                    raise NetlistError(_event_path(stack), f"YAML nesting deeper than {MAX_YAML_DEPTH} levels at "
                                                           f"{_where(event)}")
                if stack and stack[-1][0] == "map" and stack[-1][2]:
                    stack[-1][1] = "<complex key>"  # a map or list used as a key: name it, not its text
                stack.append(["map", None, True] if isinstance(event, yaml.MappingStartEvent) else ["seq", 0])
            elif isinstance(event, yaml.CollectionEndEvent):
                stack.pop()
                done(stack[-1][1] if stack and stack[-1][0] == "map" and stack[-1][2] else None)
    except yaml.YAMLError as exc:
        raise NetlistError("<yaml>", f"invalid YAML: {exc}") from None


def load_yaml(text: str) -> Any:
    """YAML text -> Python values, exactly as ``yaml.safe_load`` builds them, rejecting duplicate keys,
    anchors and aliases, tags beyond the standard scalars, and nesting deeper than ``MAX_YAML_DEPTH``.

    safe_load keeps the last of two equal keys silently, which would hide a duplicated op or queue. So the
    text is first checked event by event (:func:`_check_events`: no aliases, so nothing can expand), then
    composed into a node tree (compose builds nodes only, no objects), checked for duplicate keys and
    node types, and turned into values by PyYAML's ``SafeConstructor`` -- the constructor safe_load
    itself uses, so only plain scalars, lists and maps can come out.
    """
    _check_events(text)
    try:
        root = yaml.compose(text, Loader=_COMPOSE_LOADER)
    except yaml.YAMLError as exc:
        raise NetlistError("<yaml>", f"invalid YAML: {exc}") from None
    if root is None:
        return None

    def walk(node: Any, path: str) -> None:
        # A tree (no aliases) at most MAX_YAML_DEPTH deep: each node is visited once, recursion is bounded.
        if node.tag not in _ALLOWED_TAGS:
            kind = node.tag[len(_Y):] if node.tag.startswith(_Y) else node.tag
            raise NetlistError(path or "<root>", f"YAML type {kind} at {_where(node)} is not allowed in a netlist"
                                                 + ("; quote the value" if isinstance(node, yaml.ScalarNode) else ""))
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "<complex key>"
                if key in seen:
                    raise NetlistError(key_path(path, key), "duplicate key")
                seen.add(key)
                walk(key_node, key_path(path, key))
                walk(value_node, key_path(path, key))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, index_path(path, i))
        elif node.tag == _Y + "int" and len(node.value) > _MAX_INT_DIGITS:
            raise NetlistError(path or "<root>", f"integer literal of {len(node.value)} characters at {_where(node)}")

    walk(root, "")
    try:
        return yaml.constructor.SafeConstructor().construct_document(root)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        raise NetlistError("<yaml>", f"invalid YAML: {exc}") from None


def parse_yaml(text: str, arch: Optional[str] = None) -> Netlist:
    """Parse netlist YAML text into a :class:`Netlist`; NetlistError(key path, message) on any problem.

    ``arch`` picks the arch when ``devices.arch`` lists several (the backend reads ``ARCH_NAME`` from the
    environment for this; pybuda reads environment variables only in ``pybuda.config``), and must match a
    single-arch netlist.
    """
    if not isinstance(text, str):
        raise NetlistError("<yaml>", f"expected YAML text, got {type(text).__name__}")
    data = load_yaml(text)
    root = _map(data, "<root>") if data is not None else {}
    allowed = ("devices", "queues", "graphs", "programs", "fused_ops") + IGNORED_TOP_LEVEL
    _check_keys(root, "", allowed, ("devices", "queues", "graphs", "programs"))
    for section in ("queues", "graphs", "programs"):
        if not root[section]:
            raise NetlistError(section, "must not be empty")
    devices_arch, selected = _parse_devices(root["devices"], arch)
    queues = {}
    for name, body in _map(root["queues"], "queues").items():
        name = _str(name, key_path("queues", name))
        queues[name] = parse_queue(name, body, key_path("queues", name))
    graphs = {}
    for name, body in _map(root["graphs"], "graphs").items():
        name = _str(name, key_path("graphs", name))
        graphs[name] = parse_graph(name, body, key_path("graphs", name))
    programs = parse_programs(root["programs"], "programs")
    fused = parse_fused_ops(root["fused_ops"], "fused_ops") if root.get("fused_ops") else {}
    netlist = Netlist(devices_arch=devices_arch, queues=queues, graphs=graphs, programs=programs, fused_ops=fused,
                      selected_arch=selected)
    # Sizes are bounded here already, so nothing downstream (validation, the golden device) enumerates
    # or allocates from an absurd number; validation re-checks for netlists built in Python.
    for path, message in size_problems(netlist):
        raise NetlistError(path, message)
    return netlist


def parse_file(path: Union[str, "os.PathLike[str]"], arch: Optional[str] = None) -> Netlist:
    """:func:`parse_yaml` of a file's contents."""
    with open(path, "r", encoding="utf-8") as fh:
        return parse_yaml(fh.read(), arch=arch)
