"""The host side of a compiled model: the :class:`HostIO` record, and how a framework tensor sits in a queue.

The netlist says what the chip does; this record says what the host does around it, so that the
netlist, a :class:`HostIO` and a dict of named tensors are all a backend needs to run a compiled model
(``pybuda.golden.executor``), here or in a fresh process without the model's code (a device image stores
the record as JSON, :meth:`HostIO.to_dict` / :meth:`HostIO.from_dict`).

**Canonical form.** A per-sample tensor of shape ``S`` is stored as one queue entry ``[z, r, c]`` with
``c = S[-1]``, ``r = S[-2]`` and ``z = prod(S[:-2])`` (rank 1: ``[1, 1, c]``, rank 0: ``[1, 1, 1]``). All
leading framework dims, however many, fold into ``z`` (the op's ``t``); ``w`` is the entry index, one
entry per sample of the microbatch. ``r`` and ``c`` are zero-padded up to multiples of 32.

**Queues.** Each host-visible queue has a :class:`QueueIO`: the framework tensor's name, ``device_shape``
(the per-sample shape ``S`` whose canonical form the queue holds), ``batched`` (dim 0 of the framework
tensor is the microbatch: one entry per sample), ``host_tms`` (registry TMs the host applies before
pushing an input, on the whole framework tensor, or after reading an output) and ``framework_shape`` (the
shape the user pushes / receives). The compiler keeps the same facts in the lowered graph's queue tags
(``device_shape``, ``batched``, ``host_tms``, ``framework_shape``); :func:`queue_io` reads them.

:func:`to_device_layout` and :func:`from_device_layout` implement exactly this, for the runtime.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import torch

from pybuda.ops import registry
# The record spells dtypes as the op registry does ("float32"); torch_dtype is its inverse.
from pybuda.ops.common import dtype_name, torch_dtype  # noqa: F401  (re-exported for the executor)

TILE = 32

#: Version of the :meth:`HostIO.to_dict` layout (bumped when a field changes meaning).
FORMAT_VERSION = 1

#: Key suffix of a framework parameter whose value differs from its queue's (or that has no queue).
FRAMEWORK_SUFFIX = "#framework"


def canonical_zrc(shape: Sequence[int]) -> Tuple[int, int, int]:
    """(z, r, c) of a per-sample framework shape (leading dims folded into z)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) == 0:
        return (1, 1, 1)
    if len(shape) == 1:
        return (1, 1, shape[0])
    return (math.prod(shape[:-2]), shape[-2], shape[-1])


def tiles(n: int) -> int:
    """Number of 32-wide tiles covering ``n`` datums."""
    return -(-n // TILE)


def compact_shape(shape: Sequence[int]) -> Optional[Tuple[int, int]]:
    """``[S[0], prod(S[1:])]``, the layout a device queue holds a rank >= 3 tensor in when its canonical form
    would be mostly tile padding, or None when the canonical form is fine.

    The canonical form gives every ``[r, c]`` matrix its own tiles: a convolution weight ``[Cout, Cin, kh, kw]``
    is ``Cout·Cin`` slices of one padded tile each (a 3x3 kernel fills 9 of a tile's 1,024 datums), and past
    65,536 slices no netlist can hold it. Values a program computes never take this form; queues that the
    runtime writes (trained parameters) do, read through a reshape (same element order)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) < 3:
        return None
    z, r, c = canonical_zrc(shape)
    rest = math.prod(shape[1:])
    canonical_tiles = z * tiles(r) * tiles(c)
    compact_tiles = tiles(shape[0]) * tiles(rest)
    return (shape[0], rest) if 4 * compact_tiles <= canonical_tiles else None


def to_canonical(t: torch.Tensor, pad_value: float = 0.0, keep_transposed: bool = False) -> torch.Tensor:
    """A per-sample tensor as its padded canonical ``[z, R, C]`` form. ``keep_transposed``: a tile-aligned
    2-D transposed view (a consteval'd weight transpose) comes back as that view, for a caller that copies
    it in its own layout (the golden computes on it as it is: a GEMM reads a transposed operand directly)."""
    z, r, c = canonical_zrc(t.shape)
    rows, cols = tiles(r) * TILE, tiles(c) * TILE
    if (rows, cols) == (r, c):
        # Tile-aligned: nothing to pad, so at most one copy. Done in 2-D, a transposed weight view (consteval)
        # takes torch's blocked transpose copy, several times faster than a strided 3-D copy. Callers never
        # write into the result, so an aligned contiguous tensor comes back as a view.
        flat = t.reshape(r, c) if z == 1 else t.reshape(z, r, c)
        if keep_transposed and flat.dim() == 2 and flat.t().is_contiguous():
            return flat.reshape(z, r, c)
        return flat.contiguous().reshape(z, r, c)
    out = torch.full((z, rows, cols), pad_value, dtype=t.dtype)
    out[:, :r, :c] = t.reshape(z, r, c)
    return out


def from_canonical(t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Undo :func:`to_canonical`: crop the padding and restore ``shape``."""
    z, r, c = canonical_zrc(shape)
    return t.reshape(z, t.shape[-2], t.shape[-1])[:, :r, :c].reshape(tuple(shape))


# --- the record ----------------------------------------------------------------------------------------------


def _freeze(value: Any) -> Any:
    """Attribute values in the one form both Python and JSON give back: lists become tuples, recursively."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _freeze(v) for k, v in value.items()}
    return value


def _thaw(value: Any, where: str) -> Any:
    """The JSON form of a frozen attribute value; anything JSON cannot hold is an error here, not later."""
    if isinstance(value, tuple):
        return [_thaw(v, where) for v in value]
    if isinstance(value, dict):
        return {k: _thaw(v, where) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, numbers.Integral):  # numpy integers from shape arithmetic
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise ValueError(f"{where}: attribute value {value!r} ({type(value).__name__}) has no JSON form")


@dataclass
class HostTM:
    """One registry TM the host applies (``op_type`` with its attributes), evaluated with the op's torch reference."""

    op_type: str
    attrs: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.attrs = _freeze(dict(self.attrs))

    def to_dict(self) -> Dict[str, Any]:
        """JSON-friendly form."""
        return {"op_type": self.op_type, "attrs": _thaw(self.attrs, f"host TM {self.op_type}")}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HostTM":
        """Inverse of :meth:`to_dict`."""
        return cls(str(d["op_type"]), dict(d.get("attrs", {})))


def _shape(value: Optional[Sequence[int]]) -> Optional[Tuple[int, ...]]:
    return None if value is None else tuple(int(d) for d in value)


@dataclass
class QueueIO:
    """How one host-visible queue meets the framework: an activation input, an output, or a parameter or
    constant queue (``type: ram``, written once from the tensor named ``tensor``)."""

    queue: str  # the netlist queue name
    kind: str  # "input" | "output" | "parameter" | "constant"
    name: str  # the framework tensor (graph input/output name; the queue name for ram queues)
    framework_shape: Tuple[int, ...] = ()  # per-sample shape the user pushes / receives
    device_shape: Optional[Tuple[int, ...]] = None  # per-sample shape S whose canonical form the queue holds
    dtype: str = "float32"  # the framework tensor's dtype
    batched: bool = False  # dim 0 of the framework tensor is the microbatch: one queue entry per sample
    host_tms: List[HostTM] = field(default_factory=list)  # applied before a push / after a read, in order
    tensor: Optional[str] = None  # parameter/constant queues: key of the initial value among the tensors
    # Inputs: the values the compiled model is correct for (embedding ids: [0, vocab - 1]); a push outside
    # it is refused by the host, since the device would return a wrong value without an error.
    value_range: Optional[Tuple[float, float]] = None
    # Inputs: the same for parts of the input, each ``(dim, start, stop, low, high)``: the slice ``start:stop``
    # along ``dim`` (>= 1, so the same for every sample) must hold values in ``[low, high]`` (an edge list's
    # sources and targets, indexing different node sets), or one of the values of a sixth entry when there is
    # one (a shifted label's ``ignore_index``).
    value_regions: Optional[List[Tuple]] = None
    # Inputs: single values allowed besides ``value_range`` (a label's ``ignore_index``, which the model masks
    # out before using the label as an index).
    value_also: Optional[List[float]] = None
    # Parameter/constant queues: the host rounds the values to this many mantissa bits (nearest, ties to
    # even) before writing them, because every reader multiplies them at a fidelity that reads only that
    # many (pybuda.passes.lowered.lofi_weights).
    mantissa_bits: Optional[int] = None
    # Outputs: the input (its record's name) this output returns unchanged. The host hands the pushed tensor
    # back itself: a value the device only copies (one a CPU stage computed, on its way to the outputs) would
    # come back in the device's formats, rounded (on Grayskull, whose Dest holds no Float32, even an integer
    # past 256), from a trip that computes nothing.
    copy_of: Optional[str] = None
    # Inputs: NaN and infinity pushed here would reach data movement compiled for finite values (a picker that
    # multiplies them by its zeros: pybuda.passes.lower.specials), so the host refuses a push holding one.
    finite_only: bool = False

    def __post_init__(self) -> None:
        self.framework_shape = _shape(self.framework_shape) or ()
        if self.mantissa_bits is not None:
            bits = self.mantissa_bits
            if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or not 0 <= bits <= 23:
                raise ValueError(f"queue '{self.queue}': mantissa_bits must be an integer in [0, 23], got {bits!r}")
            if self.kind not in ("parameter", "constant"):
                raise ValueError(f"queue '{self.queue}': only parameter and constant queues are rounded, "
                                 f"not a {self.kind} queue")
            self.mantissa_bits = int(bits)
        if self.value_range is not None:
            low, high = self.value_range
            self.value_range = (float(low), float(high))
        if self.value_regions is not None:
            self.value_regions = [(int(r[0]), int(r[1]), int(r[2]), float(r[3]), float(r[4]))
                                  + ((tuple(float(v) for v in r[5]),) if len(r) > 5 and r[5] else ())
                                  for r in self.value_regions]
        if self.value_also is not None:
            self.value_also = [float(v) for v in self.value_also] or None
        self.device_shape = _shape(self.device_shape)
        self.host_tms = [tm if isinstance(tm, HostTM) else HostTM(tm[0], tm[1]) for tm in self.host_tms]

    @property
    def host_tm_list(self) -> List[Tuple[str, Dict[str, Any]]]:
        """``host_tms`` as ``[(op_type, attrs), ...]`` (the form :func:`apply_host_tms` takes)."""
        return [(tm.op_type, tm.attrs) for tm in self.host_tms]

    def to_dict(self) -> Dict[str, Any]:
        """JSON-friendly form."""
        return {"queue": self.queue, "kind": self.kind, "name": self.name,
                "framework_shape": list(self.framework_shape),
                "device_shape": None if self.device_shape is None else list(self.device_shape),
                "dtype": self.dtype, "batched": self.batched, "host_tms": [tm.to_dict() for tm in self.host_tms],
                "tensor": self.tensor, "value_range": None if self.value_range is None else list(self.value_range),
                "value_regions": None if self.value_regions is None else [
                    [list(x) if isinstance(x, tuple) else x for x in r] for r in self.value_regions],
                "value_also": self.value_also,
                "mantissa_bits": self.mantissa_bits, "copy_of": self.copy_of, "finite_only": self.finite_only}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "QueueIO":
        """Inverse of :meth:`to_dict`."""
        return cls(queue=str(d["queue"]), kind=str(d["kind"]), name=str(d["name"]),
                   framework_shape=d.get("framework_shape", ()), device_shape=d.get("device_shape"),
                   dtype=str(d.get("dtype", "float32")), batched=bool(d.get("batched", False)),
                   host_tms=[HostTM.from_dict(t) for t in d.get("host_tms", ())], tensor=d.get("tensor"),
                   value_range=d.get("value_range"), value_regions=d.get("value_regions"),
                   value_also=d.get("value_also"), mantissa_bits=d.get("mantissa_bits"), copy_of=d.get("copy_of"),
                   finite_only=bool(d.get("finite_only", False)))


@dataclass
class ParameterIO:
    """A parameter of the framework graph as the user sees it (``get_parameters``/``update_parameters``):
    its name, shape and dtype, and the key of its value among the tensors (the parameter queue's own key
    when the queue holds the value unchanged, else ``<name>#framework``)."""

    name: str
    shape: Tuple[int, ...] = ()
    dtype: str = "float32"
    tensor: str = ""

    def __post_init__(self) -> None:
        self.shape = _shape(self.shape) or ()
        self.tensor = self.tensor or self.name

    def to_dict(self) -> Dict[str, Any]:
        """JSON-friendly form."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "tensor": self.tensor}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ParameterIO":
        """Inverse of :meth:`to_dict`."""
        return cls(str(d["name"]), d.get("shape", ()), str(d.get("dtype", "float32")), str(d.get("tensor", "")))


@dataclass
class HostIO:
    """Everything the host does around a netlist run, as plain data.

    ``inputs`` follow the framework graph's input order (what the user pushes), ``outputs`` its output
    order; ``ram_queues`` are the parameter and constant queues, each written from a named tensor;
    ``parameters`` are the framework parameters; ``consteval`` maps each parameter folded at compile time
    to the framework parameters it was computed from (a runtime must not update either: the folded value
    would go stale). ``program`` is the program to run once per microbatch of ``microbatch`` samples.
    """

    graph: str = ""
    microbatch: int = 1
    program: str = "run_fwd_0"
    inputs: List[QueueIO] = field(default_factory=list)
    outputs: List[QueueIO] = field(default_factory=list)
    ram_queues: List[QueueIO] = field(default_factory=list)
    parameters: List[ParameterIO] = field(default_factory=list)
    consteval: Dict[str, List[str]] = field(default_factory=dict)

    def queue(self, name: str) -> Optional[QueueIO]:
        """The record of the host-visible queue ``name`` (None when there is none)."""
        for rec in self.inputs + self.outputs + self.ram_queues:
            if rec.queue == name:
                return rec
        return None

    def transformed_parameters(self) -> Set[str]:
        """Names of parameters whose value was transformed at compile time (folded leaves and their sources)."""
        out = set(self.consteval)
        for sources in self.consteval.values():
            out.update(sources)
        return out

    def tensor_names(self) -> List[str]:
        """Keys of every tensor a backend needs (ram queue values and framework parameters), each once."""
        names: List[str] = []
        for key in [q.tensor for q in self.ram_queues] + [p.tensor for p in self.parameters]:
            if key is not None and key not in names:
                names.append(key)
        return names

    def tensors_from(self, queue_values: Mapping[str, torch.Tensor],
                     parameter_values: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The named tensors of this record from a compile's values: ``queue_values`` by queue name (the
        lowered graph's parameter/constant values) and ``parameter_values`` by framework parameter name."""
        out: Dict[str, torch.Tensor] = {}
        for q in self.ram_queues:
            if q.tensor is not None and q.queue in queue_values:
                out[q.tensor] = queue_values[q.queue]
        for p in self.parameters:
            if p.tensor not in out and p.name in parameter_values:
                out[p.tensor] = parameter_values[p.name]
        return out

    def to_dict(self) -> Dict[str, Any]:
        """JSON-friendly form (no tensors: they travel separately, by name)."""
        return {"version": FORMAT_VERSION, "graph": self.graph, "microbatch": self.microbatch,
                "program": self.program, "inputs": [q.to_dict() for q in self.inputs],
                "outputs": [q.to_dict() for q in self.outputs], "ram_queues": [q.to_dict() for q in self.ram_queues],
                "parameters": [p.to_dict() for p in self.parameters],
                "consteval": {k: list(v) for k, v in self.consteval.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HostIO":
        """Inverse of :meth:`to_dict`; a record of another layout version is refused."""
        version = d.get("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise ValueError(f"host I/O record version {version}; this pybuda reads version {FORMAT_VERSION}")
        return cls(graph=str(d.get("graph", "")), microbatch=int(d.get("microbatch", 1)),
                   program=str(d.get("program", "run_fwd_0")),
                   inputs=[QueueIO.from_dict(q) for q in d.get("inputs", ())],
                   outputs=[QueueIO.from_dict(q) for q in d.get("outputs", ())],
                   ram_queues=[QueueIO.from_dict(q) for q in d.get("ram_queues", ())],
                   parameters=[ParameterIO.from_dict(p) for p in d.get("parameters", ())],
                   consteval={str(k): [str(s) for s in v] for k, v in d.get("consteval", {}).items()})


# --- building the record from a compile (duck-typed: this module imports no compiler code) ----------------


def queue_io(queue: Any, name: Optional[str] = None, dtype: Optional[str] = None) -> QueueIO:
    """The record of one lowered-graph queue (``pybuda.ir.lowered.BudaQueue``), from its tags.

    ``name``/``dtype``: the framework tensor's, when they differ from the queue's name / tagged dtype.
    Parameter and constant queues name their value by the queue name.
    """
    tags = queue.tags
    framework_shape = tuple(tags.get("framework_shape", queue.original_shape))
    device_shape = tags.get("device_shape")
    if device_shape is None and queue.kind == "output":
        device_shape = queue.original_shape
    ram = queue.kind in ("parameter", "constant")
    return QueueIO(queue=queue.name, kind=queue.kind, name=name or queue.name, framework_shape=framework_shape,
                   device_shape=device_shape, dtype=dtype or str(tags.get("dtype", "float32")),
                   batched=bool(tags.get("batched")), host_tms=[HostTM(t, a) for t, a in tags.get("host_tms") or ()],
                   tensor=queue.name if ram else None, value_range=tags.get("value_range"),
                   value_regions=tags.get("value_regions"), value_also=tags.get("value_also"),
                   mantissa_bits=tags.get("mantissa_bits") if ram else None,
                   finite_only=bool(tags.get("finite_only")) and queue.kind == "input")


def build_host_io(lowered: Any, framework: Any, consteval_trace: Mapping[str, Mapping[str, Any]],
                  microbatch: int, program: str = "run_fwd_0") -> HostIO:
    """The record of a compile: ``lowered`` is the lowered graph (its queues, ``input_order``,
    ``output_order`` and ``tensors``), ``framework`` the initial graph (input/output names and dtypes,
    parameters), ``consteval_trace`` the compile's folded parameters (name -> ``{"sources": [...]}``).

    Graph inputs meet their queues by name, else by position (lowering keeps the order).
    """
    input_nodes, output_nodes = list(framework.inputs), list(framework.outputs)
    queue_names = list(lowered.input_order)
    if len(input_nodes) != len(queue_names):
        raise ValueError(f"compiled model has {len(queue_names)} input queue(s) for {len(input_nodes)} graph input(s)")
    inputs = []
    for node, qname in zip(input_nodes, queue_names):
        qname = node.name if node.name in queue_names else qname
        inputs.append(queue_io(lowered.queues[qname], name=node.name, dtype=dtype_name(node.dtype)))
    outputs = [queue_io(lowered.queues[qname], name=node.name, dtype=dtype_name(node.dtype))
               for qname, node in zip(lowered.output_order, output_nodes)]
    by_name = {rec.name: rec for rec in inputs}
    for rec, node in zip(outputs, output_nodes):
        copied = by_name.get(_copied_input(framework, node))
        # The framework output is the input itself: the host returns what was pushed, whatever the device layout
        # (a CPU stage's complex value passed through the device to a later CPU stage never enters a queue).
        if copied is not None and copied.batched == rec.batched and copied.framework_shape == rec.framework_shape \
                and copied.dtype == rec.dtype:
            rec.copy_of = copied.name
    ram = []
    for qname, q in lowered.queues.items():
        if q.kind in ("parameter", "constant"):
            value = lowered.tensors.get(qname)
            ram.append(queue_io(q, dtype=dtype_name(value.dtype) if value is not None else None))
    parameters = []
    for node in framework.parameters:
        value = framework.tensors.get(node.name)
        if value is None:
            continue
        queued = lowered.tensors.get(node.name)
        q = lowered.queues.get(node.name)
        # One stored tensor when the queue holds the framework value unchanged (the usual case).
        same = q is not None and q.kind == "parameter" and queued is not None and queued.dtype == value.dtype \
            and tuple(queued.shape) == tuple(value.shape) and torch.equal(queued, value)
        parameters.append(ParameterIO(node.name, tuple(value.shape), dtype_name(value.dtype),
                                      node.name if same else node.name + FRAMEWORK_SUFFIX))
    consteval = {name: [str(s) for s in trace.get("sources", ())] for name, trace in consteval_trace.items()}
    return HostIO(graph=str(getattr(lowered, "name", "")), microbatch=max(1, int(microbatch)), program=program,
                  inputs=inputs, outputs=outputs, ram_queues=ram, parameters=parameters, consteval=consteval)


def _copied_input(framework: Any, output: Any) -> Optional[str]:
    """The graph input that graph output ``output`` is, read directly or through one ``nop`` (a frontend's
    passthrough), or None."""
    src = framework[output.operands[0]]
    if src.kind == "op" and src.op_type == "nop" and len(src.operands) == 1:
        src = framework[src.operands[0]]
    return src.name if src.kind == "input" else None


# --- layout conversions ----------------------------------------------------------------------------------------


def apply_host_tms(value: torch.Tensor, host_tms) -> torch.Tensor:
    """Apply ``[(op_type, attrs), ...]`` (or :class:`HostTM` records) with the registry's torch references."""
    for tm in host_tms or ():
        op_type, attrs = (tm.op_type, tm.attrs) if isinstance(tm, HostTM) else tm
        value = registry.evaluate(op_type, [value], attrs)
    return value


def to_device_layout(rec: QueueIO, value: torch.Tensor, *, rounded: bool = True) -> torch.Tensor:
    """The framework tensor pushed to the queue of ``rec`` as ``[entries, z, R, C]`` device data.

    Inputs: host TMs first, then one entry per sample when batched. Parameters and constants: one entry,
    rounded to ``rec.mantissa_bits`` when set, unless ``rounded`` is False (a float32 run, which models no
    multiplier to round for).
    """
    framework = value
    value = apply_host_tms(value, rec.host_tms)
    if rounded and rec.mantissa_bits is not None:
        from pybuda.golden.formats import round_mantissa  # the golden package imports this module

        value = round_mantissa(value, rec.mantissa_bits)
    device_shape = tuple(rec.device_shape) if rec.device_shape is not None else tuple(value.shape)
    if rec.batched:
        # The microbatch is folded along dim 0 (runtime.backend_api.fold_microbatch): sample i is the i-th of
        # equal dim-0 chunks, one row when the per-sample shape starts with 1.
        count = value.numel() // max(1, math.prod(device_shape))
        rows = value.shape[0] // count if value.dim() and count else 1
        samples = [value[i * rows:(i + 1) * rows].reshape(device_shape) for i in range(count)]
        return torch.stack([to_canonical(s) for s in samples])
    # One entry (every parameter and constant): no stack, which would copy each weight once more. The result
    # is still never a view of the framework tensor, which may change while the device holds the entry.
    # A transposed weight stays in its transposed layout: its copy (below) is then a plain memcpy, where a
    # transposing copy of a large model's weights took most of the device setup.
    entry = to_canonical(value.reshape(device_shape), keep_transposed=True).unsqueeze(0)
    if entry.untyped_storage().data_ptr() == framework.untyped_storage().data_ptr():
        entry = entry.clone()  # keeps the layout (preserve_format)
    return entry


def from_device_layout(rec: QueueIO, data: torch.Tensor) -> torch.Tensor:
    """``[entries, z, R, C]`` read from the output queue of ``rec`` back into the framework tensor."""
    device_shape = tuple(rec.device_shape) if rec.device_shape is not None else tuple(rec.framework_shape)
    # Output host TMs were compiled for one sample (a reshape may name the sample's shape), so they apply
    # entry by entry; the samples are then folded as the runtime folds a microbatch (0-d ones stacked).
    samples = [apply_host_tms(from_canonical(data[i], device_shape), rec.host_tms) for i in range(data.shape[0])]
    if not rec.batched:
        return samples[0]
    return torch.stack(samples) if samples[0].dim() == 0 else torch.cat(samples, 0)
