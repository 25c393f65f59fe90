"""CPU fallback stages as data: save a stage as JSON + tensors, rebuild it without running stored code.

A CPU stage (see :func:`pybuda.frontend.fallback.build_cpu_stage`) is a ``torch.fx.GraphModule`` of
placeholders, ``get_attr`` tensors, ``call_function`` nodes on ATen/prims overloads, ``operator.getitem``
and :func:`~pybuda.frontend.fallback.checked_embedding`, and one ``output`` node. Device images store
it with :func:`stage_to_data` (a JSON-serialisable dict plus the tensors, which the caller saves with
safetensors) and load it with :func:`stage_from_data`: nothing is unpickled, and no code or module
named by the file is imported or run. Targets resolve only through an allow-list (ATen/prims overloads
looked up by validated name on ``torch.ops.aten``/``torch.ops.prims``, ``operator.getitem``,
``checked_embedding``); anything else, or any malformed field, raises :class:`~pybuda.errors.ImageError`.
A stage holding another op (a library's custom op) is saved as the ATen ops the op's implementation runs
(:func:`pybuda.frontend.fx_decompose.decompose_ops`, on a copy: the stage itself is not changed); the loader's
allow-list stays as it is, and an op that cannot be decomposed is refused at save time with the reason.

Format (``version`` 1)::

    {"format": "pybuda.fx_stage", "version": 1, "name": "<stage name>",
     "tensors": {"<key>": {"dtype": "float32", "shape": [20, 8]}, ...},
     "nodes": [{"op": "placeholder", "name": "x"},
               {"op": "get_attr", "name": "w", "tensor": "<key>"},
               {"op": "call_function", "name": "add", "target": "aten.add.Tensor",
                "args": [<value>, ...], "kwargs": {"alpha": <value>}},
               {"op": "output", "name": "output", "value": <value>}]}

A ``<value>`` is JSON ``null``/``true``/``false``/an integer/a string/a list (a Python list), or a
tagged object ``{"t": TAG, "v": ...}`` with TAG one of ``node`` (name of an earlier node), ``float``
(``float.hex`` text, so ``inf``/``nan``/``-0.0`` round-trip exactly), ``tuple`` (list of values),
``dtype``/``layout``/``memory_format`` (the ``torch.<name>`` attribute name), ``device`` (``"cpu"``,
``"cuda:0"``...), ``slice`` (``[start, stop, step]`` values) or ``ellipsis`` (``v`` is null).

The loaded stage is a :class:`LoadedStage`: it walks the stored nodes and calls their targets directly,
under ``torch.no_grad()``, so no Python source is generated or executed on load. Parameters come back as
plain tensors. Stored tensors are contiguous copies; on load each must match the recorded dtype and shape.
Names, kwarg names and tensor keys must be plain identifiers without a leading ``__``, so ATen ops named
with dunders (``aten.__and__.Tensor``) are refused.
"""

from __future__ import annotations

import keyword
import operator
import re
from typing import Any, Callable, Dict, List, Mapping, Tuple

import torch
import torch.fx

from pybuda.errors import ImageError, InputError
from pybuda.frontend.fx_decompose import DECOMPOSED_FROM, NOT_DECOMPOSED, decompose_ops

FORMAT = "pybuda.fx_stage"
VERSION = 1

# Node names, tensor keys and kwarg names: Python identifiers, no leading double underscore.
_IDENT = re.compile(r"(?!__)[A-Za-z_][A-Za-z0-9_]{0,199}\Z")
# ATen/prims overloads: "<namespace>.<op>.<overload>", each part an identifier without dunders.
_OP_PART = r"(?!__)[A-Za-z_][A-Za-z0-9_]{0,127}"
_OP_TARGET = re.compile(rf"(aten|prims)\.({_OP_PART})\.({_OP_PART})\Z")
_DEVICE = re.compile(r"[a-z]{2,16}(:[0-9]{1,4})?\Z")
_STAGE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}\Z")

_OP_NAMESPACES = ("aten", "prims")
GETITEM = "operator.getitem"
CHECKED_EMBEDDING = "pybuda.checked_embedding"


def _torch_constants(kind: type) -> Dict[str, Any]:
    """``{name: value}`` for the canonical ``torch.<name>`` objects of a type (dtypes, layouts ...)."""
    table: Dict[str, Any] = {}
    for name, value in vars(torch).items():
        if isinstance(value, kind) and not name.startswith("_"):
            canon = str(value)
            canon = canon[len("torch."):] if canon.startswith("torch.") else name
            table.setdefault(canon, value)
    return table


_DTYPES: Dict[str, torch.dtype] = _torch_constants(torch.dtype)
_LAYOUTS: Dict[str, torch.layout] = _torch_constants(torch.layout)
_MEMORY_FORMATS: Dict[str, torch.memory_format] = _torch_constants(torch.memory_format)
_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}
_LAYOUT_NAMES = {v: k for k, v in _LAYOUTS.items()}
_MEMORY_FORMAT_NAMES = {v: k for k, v in _MEMORY_FORMATS.items()}

# dtypes safetensors can store.
_STORABLE_DTYPES = {d for d in (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "complex64", "uint64", "uint32",
    "uint16") if d in _DTYPES}


def _checked_embedding() -> Callable[..., Any]:
    from pybuda.frontend.fallback import checked_embedding  # fallback imports torch.py machinery: lazy

    return checked_embedding


# --- saving ---------------------------------------------------------------------------------------
def _target_name(target: Any) -> str:
    """The allow-listed name of an FX call_function target, or '' if it is not allowed."""
    if target is operator.getitem:
        return GETITEM
    if target is _checked_embedding():
        return CHECKED_EMBEDDING
    if isinstance(target, torch._ops.OpOverload):
        name = f"{target.namespace}.{target.__name__}"
        if _OP_TARGET.match(name):
            try:
                if _resolve_op(name) is target:
                    return name
            except ImageError:
                return ""
    return ""


def _describe_target(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target.__name__}"
    if isinstance(target, str):
        return target
    mod = getattr(target, "__module__", None) or type(target).__module__
    return f"{mod}.{getattr(target, '__qualname__', None) or type(target).__name__}"


def _encode(value: Any, where: Callable[[], str]) -> Any:
    """JSON form of an FX argument (see the module doc)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, torch.fx.Node):
        return {"t": "node", "v": value.name}
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return {"t": "float", "v": float(value).hex()}
    if isinstance(value, torch.Size) or type(value) is tuple:
        return {"t": "tuple", "v": [_encode(v, where) for v in value]}
    if isinstance(value, list):  # includes torch.fx's immutable_list
        return [_encode(v, where) for v in value]
    if isinstance(value, torch.dtype) and value in _DTYPE_NAMES:
        return {"t": "dtype", "v": _DTYPE_NAMES[value]}
    if isinstance(value, torch.layout) and value in _LAYOUT_NAMES:
        return {"t": "layout", "v": _LAYOUT_NAMES[value]}
    if isinstance(value, torch.memory_format) and value in _MEMORY_FORMAT_NAMES:
        return {"t": "memory_format", "v": _MEMORY_FORMAT_NAMES[value]}
    if isinstance(value, torch.device):
        text = str(value)
        if _DEVICE.match(text):
            return {"t": "device", "v": text}
    if isinstance(value, slice):
        return {"t": "slice", "v": [_encode(v, where) for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"t": "ellipsis", "v": None}
    raise ImageError(f"{where()}: cannot store an argument of type {type(value).__module__}."
                     f"{type(value).__qualname__} ({value!r:.80})")


def _attr_value(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def stage_to_data(gm: torch.fx.GraphModule, name: str) -> Tuple[dict, Dict[str, torch.Tensor]]:
    """Describe a CPU stage as ``(data, tensors)``.

    ``data`` is a JSON-serialisable dict (see the module doc); ``tensors`` maps the keys in
    ``data["tensors"]`` to contiguous, detached CPU copies of the tensors the stage's ``get_attr``
    nodes read, for the caller to save with safetensors. Ops outside the allow-list are stored decomposed
    into ATen ops (see the module doc). Raises :class:`ImageError` naming the stage, node and op for
    anything that cannot be stored faithfully.
    """
    if not isinstance(gm, torch.fx.GraphModule):
        raise ImageError(f"stage '{name}': expected a torch.fx.GraphModule, got {type(gm).__name__}")
    if not isinstance(name, str) or not _STAGE_NAME.match(name):
        raise ImageError(f"stage name {name!r} must be 1-200 characters of letters, digits, '_', '.', '-'")
    # An op outside the allow-list (a library's custom op) is stored as the ATen ops its implementation
    # runs: the stored stage is a decomposed copy; ``gm``, which the in-memory run uses, is not changed.
    gm = decompose_ops(gm, keep=lambda target: bool(_target_name(target)))
    nodes: List[dict] = []
    tensor_meta: Dict[str, dict] = {}
    tensors: Dict[str, torch.Tensor] = {}
    key_of: Dict[str, str] = {}  # get_attr target -> tensor key
    seen_names = set()
    n_outputs = 0

    for node in gm.graph.nodes:
        op = node.op
        what = _describe_target(node.target) if op == "call_function" else f"{op} {node.target!r}"

        origin = node.meta.get(DECOMPOSED_FROM)
        if origin:
            what += f", from the decomposition of {' -> '.join(origin)}"

        def where(node: torch.fx.Node = node, what: str = what) -> str:
            return f"stage '{name}', node '{node.name}' ({what})"

        if not _IDENT.match(node.name) or keyword.iskeyword(node.name):
            raise ImageError(f"{where()}: node name is not a plain identifier")
        if node.name in seen_names:
            raise ImageError(f"{where()}: duplicate node name")
        seen_names.add(node.name)
        if n_outputs:
            raise ImageError(f"{where()}: node after the output node")
        if op == "placeholder":
            if node.args or node.kwargs:
                raise ImageError(f"{where()}: placeholders with default values are not supported")
            nodes.append({"op": "placeholder", "name": node.name})
        elif op == "get_attr":
            target = node.target
            try:
                value = _attr_value(gm, target)
            except AttributeError as e:
                raise ImageError(f"{where()}: attribute not found on the stage") from e
            if isinstance(value, torch.nn.Module):
                raise ImageError(f"{where()}: refers to a submodule ({type(value).__name__}; higher-order "
                                 f"ops are not supported in stored CPU stages)")
            if not isinstance(value, torch.Tensor):
                raise ImageError(f"{where()}: refers to a {type(value).__name__}, not a tensor")
            if target not in key_of:
                key_of[target] = _store_tensor(value, target, key_of, tensor_meta, tensors, where)
            nodes.append({"op": "get_attr", "name": node.name, "tensor": key_of[target]})
        elif op == "call_function":
            target = _target_name(node.target)
            if not target:
                why = node.meta.get(NOT_DECOMPOSED)
                raise ImageError(f"{where()}: op is not in the allow-list of stored CPU stages "
                                 f"(ATen/prims overloads, operator.getitem, checked_embedding)"
                                 + (f" and cannot be decomposed into ops that are: {why}" if why else ""))
            for k in node.kwargs:
                if not isinstance(k, str) or not _IDENT.match(k) or keyword.iskeyword(k):
                    raise ImageError(f"{where()}: keyword argument name {k!r} is not a plain identifier")
            nodes.append({"op": "call_function", "name": node.name, "target": target,
                          "args": [_encode(a, where) for a in node.args],
                          "kwargs": {k: _encode(v, where) for k, v in node.kwargs.items()}})
        elif op == "output":
            n_outputs += 1
            if len(node.args) != 1 or node.kwargs:
                raise ImageError(f"{where()}: output node must have exactly one argument")
            nodes.append({"op": "output", "name": node.name, "value": _encode(node.args[0], where)})
        else:  # call_module, call_method
            raise ImageError(f"{where()}: node kind '{op}' is not supported in stored CPU stages")
    if n_outputs != 1:
        raise ImageError(f"stage '{name}': the graph has no output node")
    data = {"format": FORMAT, "version": VERSION, "name": name, "tensors": tensor_meta, "nodes": nodes}
    return data, tensors


def _store_tensor(value: torch.Tensor, target: str, key_of: Mapping[str, str], meta: Dict[str, dict],
                  tensors: Dict[str, torch.Tensor], where: Callable[[], str]) -> str:
    if value.layout != torch.strided:
        raise ImageError(f"{where()}: cannot store a {value.layout} tensor (only dense tensors)")
    if value.is_quantized:
        raise ImageError(f"{where()}: cannot store a quantized tensor")
    if value.device.type == "meta":
        raise ImageError(f"{where()}: tensor has no data (meta device)")
    dtype = _DTYPE_NAMES.get(value.dtype)
    if dtype not in _STORABLE_DTYPES:
        raise ImageError(f"{where()}: cannot store a tensor of dtype {value.dtype}")
    base = re.sub(r"[^0-9A-Za-z_]", "_", target).lstrip("_") or "t"
    if base[0].isdigit():
        base = "t" + base
    base = base[:180]
    key, i = base, 1
    while key in meta or keyword.iskeyword(key) or hasattr(torch.nn.Module, key):
        key, i = f"{base}_{i}", i + 1
    # A private, contiguous copy: safetensors needs contiguous, non-aliasing tensors.
    tensors[key] = value.detach().to("cpu").clone(memory_format=torch.contiguous_format)
    meta[key] = {"dtype": dtype, "shape": [int(d) for d in value.shape]}
    return key


# --- loading --------------------------------------------------------------------------------------
def _resolve_op(name: str) -> torch._ops.OpOverload:
    """``aten.<op>.<overload>`` / ``prims.<op>.<overload>`` -> the OpOverload, by validated getattr."""
    m = _OP_TARGET.match(name) if isinstance(name, str) else None
    if not m:
        raise ImageError(f"target {name!r} is not an allowed op name (aten.<op>.<overload> or "
                         f"prims.<op>.<overload>, {GETITEM}, {CHECKED_EMBEDDING})")
    ns_name, op_name, overload_name = m.groups()
    namespace = getattr(torch.ops, ns_name)
    try:
        packet = getattr(namespace, op_name)
        overload = getattr(packet, overload_name) if isinstance(packet, torch._ops.OpOverloadPacket) else None
    except (AttributeError, RuntimeError) as e:
        raise ImageError(f"target {name!r}: no such op in torch.ops.{ns_name}") from e
    if (not isinstance(overload, torch._ops.OpOverload) or overload.namespace != ns_name
            or overload.__name__ != f"{op_name}.{overload_name}"):
        raise ImageError(f"target {name!r}: no such op in torch.ops.{ns_name}")
    return overload


def _resolve_target(name: Any) -> Callable[..., Any]:
    if name == GETITEM:
        return operator.getitem
    if name == CHECKED_EMBEDDING:
        return _checked_embedding()
    return _resolve_op(name)


def _check_keys(obj: Any, required: set, what: str) -> None:
    if not isinstance(obj, dict):
        raise ImageError(f"{what}: expected an object, got {type(obj).__name__}")
    keys = set(obj)
    if keys != required:
        extra, missing = sorted(map(str, keys - required)), sorted(map(str, required - keys))
        raise ImageError(f"{what}: " + "; ".join(
            ([f"unknown key(s) {extra}"] if extra else []) + ([f"missing key(s) {missing}"] if missing else [])))


def _decode(value: Any, env: Mapping[str, Any], where: str, depth: int = 0) -> Any:
    if depth > 32:
        raise ImageError(f"{where}: arguments nested too deeply")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, list):
        return [_decode(v, env, where, depth + 1) for v in value]
    if not isinstance(value, dict):
        raise ImageError(f"{where}: unexpected {type(value).__name__} in arguments (floats must be tagged)")
    _check_keys(value, {"t", "v"}, f"{where}: tagged value")
    tag, v = value["t"], value["v"]
    if tag == "node":
        if not isinstance(v, str) or v not in env:
            raise ImageError(f"{where}: refers to node {v!r}, which is not defined before it")
        return env[v]
    if tag == "float":
        if not isinstance(v, str) or len(v) > 64:
            raise ImageError(f"{where}: malformed float {v!r:.80}")
        try:
            return float.fromhex(v)
        except (ValueError, OverflowError) as e:
            raise ImageError(f"{where}: malformed float {v!r:.80}") from e
    if tag == "tuple":
        if not isinstance(v, list):
            raise ImageError(f"{where}: malformed tuple")
        return tuple(_decode(x, env, where, depth + 1) for x in v)
    tables = {"dtype": _DTYPES, "layout": _LAYOUTS, "memory_format": _MEMORY_FORMATS}
    if tag in tables:
        if not isinstance(v, str) or v not in tables[tag]:
            raise ImageError(f"{where}: unknown {tag} {v!r:.80}")
        return tables[tag][v]
    if tag == "device":
        if not isinstance(v, str) or not _DEVICE.match(v):
            raise ImageError(f"{where}: malformed device {v!r:.80}")
        try:
            return torch.device(v)
        except RuntimeError as e:
            raise ImageError(f"{where}: unknown device {v!r}") from e
    if tag == "slice":
        if not isinstance(v, list) or len(v) != 3:
            raise ImageError(f"{where}: malformed slice")
        return slice(*(_decode(x, env, where, depth + 1) for x in v))
    if tag == "ellipsis":
        if v is not None:
            raise ImageError(f"{where}: malformed ellipsis")
        return Ellipsis
    raise ImageError(f"{where}: unknown value tag {tag!r:.80}")


def _check_tensor(key: str, meta: Any, tensors: Mapping[str, torch.Tensor], stage: str) -> torch.Tensor:
    what = f"stage '{stage}', tensor '{key}'"
    _check_keys(meta, {"dtype", "shape"}, what)
    dtype, shape = meta["dtype"], meta["shape"]
    if not isinstance(dtype, str) or dtype not in _STORABLE_DTYPES:
        raise ImageError(f"{what}: unsupported dtype {dtype!r:.80}")
    if (not isinstance(shape, list) or len(shape) > 64
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise ImageError(f"{what}: malformed shape {shape!r:.200}")
    if key not in tensors:
        raise ImageError(f"{what}: missing from the stored tensors")
    t = tensors[key]
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.is_quantized:
        raise ImageError(f"{what}: not a dense tensor")
    if t.dtype != _DTYPES[dtype] or list(t.shape) != shape:
        raise ImageError(f"{what}: stored tensor is {t.dtype} {list(t.shape)}, the stage expects "
                         f"torch.{dtype} {shape}")
    return t.detach()


def stage_from_data(data: dict, tensors: Mapping[str, torch.Tensor]) -> "LoadedStage":
    """Rebuild a stage saved by :func:`stage_to_data`: ``fn(*inputs) -> tuple``.

    ``tensors`` maps the keys of ``data["tensors"]`` to tensors (e.g. ``safetensors.torch.load``'s
    result; extra entries are ignored). Only allow-listed targets are resolved; any malformed or
    unsupported content raises :class:`ImageError`.
    """
    _check_keys(data, {"format", "version", "name", "tensors", "nodes"}, "CPU stage")
    if data["format"] != FORMAT:
        raise ImageError(f"CPU stage: format is {data['format']!r:.80}, expected {FORMAT!r}")
    version = data["version"]
    if not isinstance(version, int) or isinstance(version, bool) or version != VERSION:
        raise ImageError(f"CPU stage: unsupported format version {version!r:.40} (this pybuda reads "
                         f"version {VERSION})")
    name = data["name"]
    if not isinstance(name, str) or not _STAGE_NAME.match(name):
        raise ImageError(f"CPU stage: malformed stage name {name!r:.80}")
    metas, node_list = data["tensors"], data["nodes"]
    if not isinstance(metas, dict):
        raise ImageError(f"stage '{name}': 'tensors' must be an object")
    if not isinstance(node_list, list):
        raise ImageError(f"stage '{name}': 'nodes' must be a list")
    if not isinstance(tensors, Mapping):
        raise ImageError(f"stage '{name}': tensors must be a mapping of names to tensors")

    buffers: Dict[str, torch.Tensor] = {}
    for key, meta in metas.items():
        if not isinstance(key, str) or not _IDENT.match(key) or keyword.iskeyword(key):
            raise ImageError(f"stage '{name}': malformed tensor name {key!r:.80}")
        buffers[key] = _check_tensor(key, meta, tensors, name)

    steps: List[Tuple[Any, ...]] = []
    env: Dict[str, _Ref] = {}
    fields = {"placeholder": {"op", "name"}, "get_attr": {"op", "name", "tensor"},
              "call_function": {"op", "name", "target", "args", "kwargs"}, "output": {"op", "name", "value"}}
    output: Any = None
    seen_output = False
    for i, entry in enumerate(node_list):
        if not isinstance(entry, dict) or entry.get("op") not in fields:
            op = entry.get("op") if isinstance(entry, dict) else None
            raise ImageError(f"stage '{name}', node #{i}: unknown or missing node kind {op!r:.80}")
        op = entry["op"]
        node_name = entry.get("name")
        if not isinstance(node_name, str) or not _IDENT.match(node_name) or keyword.iskeyword(node_name):
            raise ImageError(f"stage '{name}', node #{i} ({op}): malformed node name {node_name!r:.80}")
        where = f"stage '{name}', node '{node_name}' ({op}"
        where += f" {entry.get('target')!r:.80})" if op == "call_function" else ")"
        _check_keys(entry, fields[op], where)
        if seen_output:
            raise ImageError(f"{where}: node after the output node")
        if node_name in env:
            raise ImageError(f"{where}: duplicate node name")
        if op == "placeholder":
            steps.append(("input", node_name))
        elif op == "get_attr":
            key = entry["tensor"]
            if not isinstance(key, str) or key not in metas:
                raise ImageError(f"{where}: tensor {key!r:.80} is not listed in 'tensors'")
            steps.append(("tensor", node_name, key))
        elif op == "call_function":
            target = _resolve_target(entry["target"]) if isinstance(entry["target"], str) else None
            if target is None:
                raise ImageError(f"{where}: target must be a string")
            args, kwargs = entry["args"], entry["kwargs"]
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise ImageError(f"{where}: 'args' must be a list and 'kwargs' an object")
            for k in kwargs:
                if not _IDENT.match(k) or keyword.iskeyword(k):
                    raise ImageError(f"{where}: malformed keyword argument name {k!r:.80}")
            steps.append(("call", node_name, target, tuple(_decode(a, env, where) for a in args),
                          {k: _decode(v, env, where) for k, v in kwargs.items()}))
        else:
            output = _decode(entry["value"], env, where)
            seen_output = True
        env[node_name] = _Ref(node_name)
    if not seen_output:
        raise ImageError(f"stage '{name}': no output node")
    return LoadedStage(name, steps, output, buffers)


class _Ref:
    """A reference to an earlier node's value inside decoded arguments."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:  # as torch.fx.Node prints: the node's name
        return self.name


def _substitute(value: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(value, _Ref):
        return values[value.name]
    if isinstance(value, list):
        return [_substitute(v, values) for v in value]
    if isinstance(value, tuple):
        return tuple(_substitute(v, values) for v in value)
    if isinstance(value, slice):
        return slice(*(_substitute(v, values) for v in (value.start, value.stop, value.step)))
    return value


class LoadedStage:
    """A CPU stage rebuilt from data: ``stage(*inputs) -> tuple``.

    It walks the stored nodes and calls their allow-listed targets directly — no Python source is generated
    or executed (``torch.fx.GraphModule`` would generate and ``exec`` a ``forward``), so what the file holds is
    only ever data handed to torch ops.
    """

    def __init__(self, name: str, steps: List[Tuple[Any, ...]], output: Any, tensors: Dict[str, torch.Tensor]):
        self.name = name
        self._steps = steps
        self._output = output
        self._tensors = tensors
        self._inputs = sum(1 for s in steps if s[0] == "input")

    def __call__(self, *inputs: torch.Tensor) -> Any:
        if len(inputs) != self._inputs:
            raise InputError(f"CPU stage '{self.name}' takes {self._inputs} input(s), got {len(inputs)}")
        values: Dict[str, Any] = {}
        feed = iter(inputs)
        with torch.no_grad():
            for step in self._steps:
                kind, node = step[0], step[1]
                if kind == "input":
                    values[node] = next(feed)
                elif kind == "tensor":
                    values[node] = self._tensors[step[2]]
                else:
                    values[node] = step[2](*_substitute(step[3], values), **_substitute(step[4], values))
            return _substitute(self._output, values)

    def calls(self) -> List[Tuple[str, Any, tuple, dict]]:
        """``(node name, target, args, kwargs)`` of each call, in order (references print as node names)."""
        return [(s[1], s[2], s[3], s[4]) for s in self._steps if s[0] == "call"]

    def __repr__(self) -> str:
        return f"LoadedStage({self.name!r}, {len(self._steps)} nodes)"

