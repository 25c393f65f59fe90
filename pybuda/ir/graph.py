"""The framework-neutral graph IR: a DAG of named nodes in insertion (topological) order.

Node kinds: ``input`` (activations pushed by the user), ``parameter`` (weights), ``constant``
(values known at compile time), ``op`` (a registry op applied to operand nodes) and ``output``
(marks a value the graph returns). Ops are validated against the registry when added, so a Graph is
always shape-consistent. Parameter and constant values live in ``Graph.tensors``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch

from pybuda.errors import GraphFormatError, ModuleError, PybudaError
from pybuda.ops import registry

INPUT, PARAMETER, CONSTANT, OP, OUTPUT = "input", "parameter", "constant", "op", "output"
NODE_KINDS = (INPUT, PARAMETER, CONSTANT, OP, OUTPUT)

#: Tag of parameter nodes whose value the runtime rewrites after compile (trained weights, optimizer state
#: and hyper-parameters): the compiler must not fold them or derive compile-time copies of them.
RUNTIME_UPDATED = "updated_at_runtime"
#: Tag of output nodes a training netlist may write in place into the ram they update (an optimizer's new
#: parameter or state): the op writing one keeps the queue's exact tile shape (the balancer pads no dimension).
WRITTEN_IN_PLACE = "written_in_place"
#: Tag of input nodes that another program of a training netlist may write on the device with junk (not zeros)
#: in the tile padding: the compiled graph zeroes that padding as it reads the input, so it computes what it
#: would from a host push (the host pads with zeros).
JUNK_PADDED_INPUT = "junk_padded_input"
#: Tag of an op whose result is one of its operand's values, or its negation: the index of that operand. A
#: reduce max's padding mask (``x + 0``, PAD_LOWEST in the padding) and the negations that make a min the max of
#: ``0 - x``; the comparisons of argmax, argmin and ``x == x.max(d)`` need them exact, and the data-format pass
#: gives them formats that hold that operand's values (pybuda.passes.lowered.data_formats).
HOLDS_OPERAND = "holds_operand"
#: Tag of the ops computing the difference a comparison steps on (``a - b``, ``|a - b|``): only its sign and
#: whether it is zero matter, and the data-format pass keeps them in a format that flushes no small difference
#: to zero (Float16_b or Float32; Float16 flushes magnitudes below 2**-14, a block format the small values of a
#: block beside large ones), so that close values never compare equal.
SIGN_EXACT = "sign_exact"
#: Tag of a value that must keep its NaNs and infinities because a NaN/infinity test reads it, directly or through
#: the ops between, or a comparison reads it directly (pybuda.passes.graph.nonfinite): the data-format pass keeps
#: such ops in Float16_b or Float32, which hold both (Float16 and the block formats do not).
NONFINITE_SAFE = "nonfinite_safe"
#: Tag of the ops of an explicit NaN/infinity test (``isnan``, ``isinf``, ``x != x`` ...: ``|x|`` and ``x - x``):
#: everything upstream of them that may make a NaN or infinity is NONFINITE_SAFE.
TESTS_NONFINITE = "tests_nonfinite"
#: Tag of a graph input whose compile sample held a NaN or an infinity (pybuda.compile.ModuleGraph).
SAMPLE_NONFINITE = "sample_nonfinite"
#: Tag of a graph input whose compile sample held a mask's fill (a NaN, an infinity or a huge magnitude;
#: pybuda.passes.graph.mask_fills).
SAMPLE_FILL = "sample_fill"
#: Tag of a value whose NaNs and infinities data movement must carry exactly (pybuda.passes.graph.nonfinite,
#: :func:`~pybuda.passes.graph.nonfinite.mark_nonfinite_carriers`): a picker reading it copies them by a code
#: (pybuda.passes.lower.specials).
CARRIES_NONFINITE = "carries_nonfinite"
#: Tag of a value that may hold a mask's fill (an infinity or a huge finite stand-in) beside ordinary data
#: (pybuda.passes.graph.mask_fills): the data-format pass keeps it out of block formats, whose shared exponent
#: would flush the ordinary data of the fill's block to zero.
HOLDS_MASK_FILL = "holds_mask_fill"


def dtype_name(dtype: torch.dtype) -> str:
    """'float32' for torch.float32, and so on (stable, JSON-friendly)."""
    return str(dtype).replace("torch.", "")


def dtype_from_name(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ModuleError(f"unknown dtype '{name}'")
    return dt


@dataclass
class Node:
    """One node of a Graph. ``operands`` are node names; ``attrs`` are the op's validated attributes."""

    name: str
    kind: str
    shape: Tuple[int, ...]
    dtype: torch.dtype = torch.float32
    op_type: Optional[str] = None
    operands: List[str] = field(default_factory=list)
    attrs: Dict[str, Any] = field(default_factory=dict)
    requires_grad: bool = False
    tags: Dict[str, Any] = field(default_factory=dict)  # e.g. layer, source location, fallback reason

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"name": self.name, "kind": self.kind, "shape": list(self.shape),
                             "dtype": dtype_name(self.dtype)}
        if self.op_type is not None:
            d["op_type"] = self.op_type
        if self.operands:
            d["operands"] = list(self.operands)
        if self.attrs:
            d["attrs"] = _jsonable(self.attrs)
        if self.requires_grad:
            d["requires_grad"] = True
        if self.tags:
            d["tags"] = _jsonable(self.tags)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Node":
        """A node from :meth:`to_dict`'s form; every field is checked, so a tampered file raises
        :class:`~pybuda.errors.GraphFormatError` naming the node and the field."""
        if not isinstance(d, Mapping):
            raise GraphFormatError(f"graph node must be an object, got {type(d).__name__}")
        name = _get(d, "name", str, "node")
        where = f"node '{name}'"
        _check_name(name, where + " name")
        kind = _get(d, "kind", str, where)
        if kind not in NODE_KINDS:
            raise GraphFormatError(f"{where}: field 'kind' is {kind!r}; expected one of {list(NODE_KINDS)}")
        shape = _get(d, "shape", list, where)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in shape):
            raise GraphFormatError(f"{where}: field 'shape' must be a list of non-negative ints, got {shape!r}")
        try:
            dtype = dtype_from_name(_get(d, "dtype", str, where))
        except ModuleError as e:
            raise GraphFormatError(f"{where}: field 'dtype': {e}") from None
        op_type = _get(d, "op_type", str, where, required=False)
        operands = _get(d, "operands", list, where, required=False) or []
        if not all(isinstance(o, str) for o in operands):
            raise GraphFormatError(f"{where}: field 'operands' must be a list of node names, got {operands!r}")
        attrs = _get(d, "attrs", dict, where, required=False) or {}
        try:
            attrs = _from_jsonable(attrs)
        except PybudaError as e:
            raise GraphFormatError(f"{where}: field 'attrs': {e}") from None
        except (AttributeError, KeyError, TypeError) as e:
            raise GraphFormatError(f"{where}: field 'attrs' holds an unknown value: {e!r}") from None
        requires_grad = _get(d, "requires_grad", bool, where, required=False) or False
        tags = _get(d, "tags", dict, where, required=False) or {}
        # Which kinds take an op type and how many operands, so a graph rebuilt from JSON is well formed.
        if (kind == OP) != (op_type is not None):
            raise GraphFormatError(f"{where}: field 'op_type' must be given exactly for op nodes (kind {kind!r})")
        wanted = {INPUT: 0, PARAMETER: 0, CONSTANT: 0, OUTPUT: 1}.get(kind)
        if wanted is not None and len(operands) != wanted:
            raise GraphFormatError(f"{where}: a {kind} node takes {wanted} operand(s), field 'operands' has "
                                   f"{len(operands)}")
        return cls(name=name, kind=kind, shape=tuple(shape), dtype=dtype, op_type=op_type, operands=list(operands),
                   attrs=attrs, requires_grad=requires_grad, tags=dict(tags))


def _get(d: Mapping[str, Any], key: str, kind: type, where: str, required: bool = True) -> Any:
    """``d[key]`` checked to be a ``kind``; GraphFormatError naming ``where`` and the field otherwise."""
    if key not in d:
        if required:
            raise GraphFormatError(f"{where}: field '{key}' is missing")
        return None
    value = d[key]
    # bool is an int subclass, and an int is no bool: check both ways.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise GraphFormatError(f"{where}: field '{key}' must be {kind.__name__}, got {value!r}")
    return value


def _check_name(name: str, where: str) -> None:
    # Names become queue names and (sanitised) file names; control characters and NUL have no business in
    # them and only appear in a tampered file.
    if not name or any(ord(c) < 32 or c == "\x7f" for c in name):
        raise GraphFormatError(f"{where} {name!r} is empty or holds control characters")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.dtype):
        return {"__dtype__": dtype_name(value)}
    if hasattr(value, "name") and hasattr(value, "value") and type(value).__module__.startswith("pybuda"):
        return {"__enum__": type(value).__name__, "name": value.name}
    return value


def _from_jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        if "__dtype__" in value:
            return dtype_from_name(value["__dtype__"])
        if "__enum__" in value:
            from pybuda import tensor as _t

            return getattr(_t, value["__enum__"])[value["name"]]
        return {k: _from_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_from_jsonable(v) for v in value)
    return value


class Graph:
    """A named DAG of :class:`Node` in insertion order (which is always a topological order)."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.nodes: Dict[str, Node] = {}
        self.tensors: Dict[str, torch.Tensor] = {}  # values of parameter and constant nodes
        self.microbatch: int = 1

    # --- building ------------------------------------------------------------------------------
    def _add(self, node: Node) -> Node:
        if node.name in self.nodes:
            raise ModuleError(f"graph '{self.name}' already has a node named '{node.name}'")
        for operand in node.operands:
            if operand not in self.nodes:
                raise ModuleError(f"node '{node.name}' uses '{operand}', which is not in graph '{self.name}'")
        self.nodes[node.name] = node
        return node

    def add_input(self, name: str, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                  requires_grad: bool = False) -> Node:
        return self._add(Node(name, INPUT, tuple(shape), dtype, requires_grad=requires_grad))

    def add_parameter(self, name: str, value: torch.Tensor, requires_grad: bool = True) -> Node:
        self.tensors[name] = value
        return self._add(Node(name, PARAMETER, tuple(value.shape), value.dtype, requires_grad=requires_grad))

    def add_constant(self, name: str, value: torch.Tensor) -> Node:
        self.tensors[name] = value
        return self._add(Node(name, CONSTANT, tuple(value.shape), value.dtype))

    def add_op(self, name: str, op_type: str, operands: Sequence[str], attrs: Optional[Mapping[str, Any]] = None,
               tags: Optional[Mapping[str, Any]] = None) -> Node:
        """Add an op node; the registry validates operand count, attributes and shapes."""
        for operand in operands:
            if operand not in self.nodes:
                raise ModuleError(f"op '{name}' uses '{operand}', which is not in graph '{self.name}'")
        ins = [self.nodes[o] for o in operands]
        shape, dtype, full_attrs = registry.infer(op_type, [n.shape for n in ins], [n.dtype for n in ins],
                                                  attrs or {}, op_name=name)
        requires_grad = any(n.requires_grad for n in ins)
        return self._add(Node(name, OP, shape, dtype, op_type, list(operands), full_attrs, requires_grad,
                              dict(tags or {})))

    def add_output(self, name: str, source: str) -> Node:
        src = self.nodes[source]
        return self._add(Node(name, OUTPUT, src.shape, src.dtype, operands=[source],
                              requires_grad=src.requires_grad))

    def remove(self, name: str) -> None:
        """Remove a node that nothing uses any more."""
        users = self.users(name)
        if users:
            raise ModuleError(f"cannot remove '{name}': used by {users}")
        del self.nodes[name]
        self.tensors.pop(name, None)

    # --- queries -------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Node]:
        return iter(list(self.nodes.values()))

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def __contains__(self, name: str) -> bool:
        return name in self.nodes

    def of_kind(self, kind: str) -> List[Node]:
        return [n for n in self.nodes.values() if n.kind == kind]

    @property
    def inputs(self) -> List[Node]:
        return self.of_kind(INPUT)

    @property
    def parameters(self) -> List[Node]:
        return self.of_kind(PARAMETER)

    @property
    def constants(self) -> List[Node]:
        return self.of_kind(CONSTANT)

    @property
    def ops(self) -> List[Node]:
        return self.of_kind(OP)

    @property
    def outputs(self) -> List[Node]:
        return self.of_kind(OUTPUT)

    def users(self, name: str) -> List[str]:
        return [n.name for n in self.nodes.values() if name in n.operands]

    def user_map(self) -> Dict[str, List[str]]:
        """Every node's users, computed in one pass (use in passes that ask for many nodes)."""
        out: Dict[str, List[str]] = {n: [] for n in self.nodes}
        for node in self.nodes.values():
            for operand in node.operands:
                if node.name not in out[operand]:
                    out[operand].append(node.name)
        return out

    def ancestry(self, name: str) -> Iterator[Node]:
        """``name``'s node and every node it is computed from, each once (iterative: an activation's ancestry
        is as deep as the model). A caller may stop early."""
        seen, pending = set(), [name]
        while pending:
            current = pending.pop()
            if current in seen:
                continue
            seen.add(current)
            node = self[current]
            yield node
            pending.extend(node.operands)

    def eliminate_dead_code(self) -> None:
        """Drop ops, parameters and constants no output depends on (inputs always stay)."""
        live = set()
        for node in reversed(list(self.nodes.values())):
            if node.kind == OUTPUT or node.name in live:
                live.add(node.name)
                live.update(node.operands)
        dead = {name for name, node in self.nodes.items() if name not in live and node.kind != INPUT}
        if dead:
            self.nodes = {k: v for k, v in self.nodes.items() if k not in dead}
            for name in dead:
                self.tensors.pop(name, None)

    def unique_name(self, base: str) -> str:
        if base not in self.nodes:
            return base
        i = 1
        while f"{base}_{i}" in self.nodes:
            i += 1
        return f"{base}_{i}"

    def copy(self) -> "Graph":
        g = Graph(self.name)
        g.microbatch = self.microbatch
        for n in self.nodes.values():
            g.nodes[n.name] = Node(n.name, n.kind, n.shape, n.dtype, n.op_type, list(n.operands), dict(n.attrs),
                                   n.requires_grad, dict(n.tags))
        g.tensors = dict(self.tensors)
        return g

    # --- printing and serialisation --------------------------------------------------------------
    def __str__(self) -> str:
        from pybuda.ir.printer import format_graph

        return format_graph(self)

    def to_dict(self) -> Dict[str, Any]:
        """Structure only; tensor values are saved separately (see :meth:`save`)."""
        return {"name": self.name, "microbatch": self.microbatch, "nodes": [n.to_dict() for n in self.nodes.values()]}

    def to_json(self, indent: Optional[int] = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], tensors: Optional[Mapping[str, torch.Tensor]] = None) -> "Graph":
        """A graph from :meth:`to_dict`'s form. The structure is checked field by field, op nodes are
        re-validated against the op registry (shape and attributes), and the given tensors must match the
        parameter and constant nodes; anything else raises :class:`~pybuda.errors.GraphFormatError`."""
        if not isinstance(d, Mapping):
            raise GraphFormatError(f"graph must be a JSON object, got {type(d).__name__}")
        name = _get(d, "name", str, "graph")
        _check_name(name, "graph name")
        g = cls(name)
        microbatch = _get(d, "microbatch", int, f"graph '{name}'", required=False)
        g.microbatch = 1 if microbatch is None else microbatch
        if g.microbatch < 1:
            raise GraphFormatError(f"graph '{name}': field 'microbatch' must be positive, got {g.microbatch}")
        for nd in _get(d, "nodes", list, f"graph '{name}'"):
            node = Node.from_dict(nd)
            try:
                if node.kind == OP:
                    g._check_op(node)
                g._add(node)
            except GraphFormatError:
                raise
            except PybudaError as e:
                raise GraphFormatError(f"graph '{name}': node '{node.name}': {e}") from None
        g.tensors = dict(tensors or {})
        if tensors is not None:
            g._check_tensors()
        return g

    def _check_op(self, node: Node) -> None:
        # The registry re-derives the op's shape from its operands, so an edited shape or attribute in the
        # JSON is caught at load time instead of failing (or computing garbage) at run time.
        for operand in node.operands:
            if operand not in self.nodes:
                raise GraphFormatError(f"node '{node.name}' uses '{operand}', which is not defined before it")
        ins = [self.nodes[o] for o in node.operands]
        try:
            shape, _, _ = registry.infer(node.op_type, [n.shape for n in ins], [n.dtype for n in ins],
                                         node.attrs, op_name=node.name)
        except PybudaError:
            raise
        except Exception as e:  # a registry op's shape function fed tampered attributes
            raise GraphFormatError(f"node '{node.name}': attributes {node.attrs!r} are invalid: {e!r}") from None
        if tuple(shape) != tuple(node.shape):
            raise GraphFormatError(f"node '{node.name}': field 'shape' is {list(node.shape)}, but op "
                                   f"'{node.op_type}' on its operands gives {list(shape)}")

    def _check_tensors(self) -> None:
        for node in self.nodes.values():
            if node.kind not in (PARAMETER, CONSTANT):
                continue
            value = self.tensors.get(node.name)
            if value is None:
                raise GraphFormatError(f"graph '{self.name}': no tensor for {node.kind} '{node.name}'")
            if tuple(value.shape) != tuple(node.shape):
                raise GraphFormatError(f"graph '{self.name}': tensor '{node.name}' has shape {list(value.shape)}, "
                                       f"but the graph expects {list(node.shape)}")

    @classmethod
    def from_json(cls, text: str, tensors: Optional[Mapping[str, torch.Tensor]] = None) -> "Graph":
        """A graph from :meth:`to_json`'s text (see :meth:`from_dict` for the checks)."""
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, TypeError, RecursionError) as e:
            raise GraphFormatError(f"graph JSON is not valid JSON: {e}") from None
        return cls.from_dict(data, tensors)

    def save(self, path_prefix: str) -> None:
        """Write ``<prefix>.json`` (structure) and ``<prefix>.safetensors`` (values); no pickles."""
        from safetensors.torch import save_file

        with open(path_prefix + ".json", "w") as f:
            f.write(self.to_json())
        save_file({k: v.contiguous() for k, v in self.tensors.items()}, path_prefix + ".safetensors")

    @classmethod
    def load(cls, path_prefix: str) -> "Graph":
        """Read what :meth:`save` wrote. A malformed or truncated file, or a tensor whose shape differs
        from its node's, raises :class:`~pybuda.errors.GraphFormatError` naming the file."""
        from safetensors.torch import load_file

        json_path, values_path = path_prefix + ".json", path_prefix + ".safetensors"
        try:
            with open(json_path, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError as e:
            raise GraphFormatError(f"{json_path}: not UTF-8 text: {e}") from None
        try:
            # SafetensorError (truncated or corrupt header) is no public exception class to catch by name.
            tensors = load_file(values_path)
        except OSError:
            raise
        except Exception as e:
            raise GraphFormatError(f"{values_path}: cannot read tensors ({type(e).__name__}: {e})") from None
        try:
            return cls.from_json(text, tensors)
        except GraphFormatError as e:
            raise GraphFormatError(f"{json_path}: {e}") from None
