"""Runs a compiled model on the golden backend: the runtime's executor for ``BackendType.Golden``.

Its inputs are the netlist, the host-I/O record (:class:`pybuda.netlist.host_io.HostIO`: where each
framework tensor sits in a queue, the host-side TMs, the parameters) and a dict of named tensors (the
initial values of parameter and constant queues and the framework parameters) — nothing of the compiler's
in-memory state and none of the model's Python code, so a device image runs from what it stores. Each
push is cut into microbatches of the compiled ``input_count``; each microbatch is pushed, the program
runs once, and the outputs are popped and turned back into framework tensors.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import torch

from pybuda.dtypes import DataFormat
from pybuda.errors import InputError, RuntimeFailure
from pybuda.golden import heap
from pybuda.golden.device import GoldenDevice
from pybuda.golden.formats import exact_integer_bound
from pybuda.netlist.host_io import HostIO, from_device_layout, to_device_layout, torch_dtype

log = logging.getLogger(__name__)

#: Bytes of weights written between two trims of the C heap while a device is built: small enough that the
#: weights' freed temporaries never lift the build's peak above the run's own (BERT-base: a build peak of
#: 1.04-1.08 GB at 64 MiB, 0.99 GB at 4 MiB, under the run's 1.00-1.05 GB), at no measurable cost.
TRIM_EVERY_BYTES = 4 << 20


class GoldenExecutor:
    """The executor contract of ``pybuda.runtime.backend_api`` on top of a :class:`GoldenDevice`.

    ``netlist``: the parsed netlist; ``host_io``: its host-I/O record; ``tensors``: tensors by the keys
    the record names (ram queue values and framework parameters, in framework layout). ``fast``: plain
    float32, no formats or fidelity.
    """

    def __init__(self, netlist: Any, host_io: HostIO, tensors: Mapping[str, torch.Tensor], fast: bool = False,
                 tf32_operands: bool = False):
        if netlist is None or host_io is None:
            raise InputError("the compile results hold no netlist: compile to CompileDepth.FULL before running")
        self.host_io = host_io
        self.device = GoldenDevice(netlist, fast=fast, tf32_operands=tf32_operands)
        self._input_formats = {q.name: q.df for q in netlist.queues.values()}
        self.microbatch = max(1, int(netlist.graphs[next(iter(netlist.graphs))].input_count))
        self._transformed = host_io.transformed_parameters()
        # A parameter folded at compile time may come without its framework value (a device image stores
        # only the folded one): it is then not listed; every other parameter must have its tensor.
        self._params: Dict[str, torch.Tensor] = {
            p.name: _tensor(tensors, p.tensor, f"parameter '{p.name}'") for p in host_io.parameters
            if p.tensor in tensors or p.name not in self._transformed or p.tensor == p.name}
        written = 0
        heap.keep_freed_memory()  # runs reuse what they free (see pybuda.golden.heap)
        for rec in host_io.ram_queues:
            value = _tensor(tensors, rec.tensor, f"queue '{rec.queue}'")
            # to_device_layout returns a tensor of its own (never a view of the framework's): handed over
            entry = to_device_layout(rec, value, rounded=not fast)[0]
            written += entry.numel() * entry.element_size()
            self.device.write_ram(rec.queue, entry, owned=True)
            if written >= TRIM_EVERY_BYTES:  # the weights' temporaries: see heap.release_free_memory
                heap.release_free_memory()
                written = 0
        heap.release_free_memory()

    def run(self, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """One push: framework inputs in graph-input order -> framework outputs in graph-output order."""
        host_inputs = self.host_io.inputs
        if len(inputs) != len(host_inputs):
            raise InputError(f"the compiled model takes {len(host_inputs)} input(s), got {len(inputs)}")
        for rec, x in zip(host_inputs, inputs):
            check_push(rec, x, self._input_formats.get(rec.queue))
        # A complex input is a CPU stage's value the device only passes on to a later CPU stage (the compiler puts
        # no device reader on a complex value: it holds its own as real pairs); the output that copies it is
        # returned from the push below, so its queue gets the real part, which nothing reads.
        device_inputs = [to_device_layout(rec, x.real if x.is_complex() else x) for rec, x in zip(host_inputs, inputs)]
        entries = device_inputs[0].shape[0] if device_inputs else self.microbatch
        if entries % self.microbatch:
            raise InputError(f"pushed {entries} samples; the model was compiled for microbatches of "
                             f"{self.microbatch}, so pushes must be a multiple of it")
        outputs = self.host_io.outputs
        popped: List[List[torch.Tensor]] = [[] for _ in outputs]
        for start in range(0, entries, self.microbatch):
            for rec, data in zip(host_inputs, device_inputs):
                self.device.push(rec.queue, data[start:start + self.microbatch])
            self.device.run_program(self.host_io.program, {"$p_loop_count": 1})
            for i, rec in enumerate(outputs):
                count = self.microbatch if rec.batched else 1
                popped[i].append(self.device.pop(rec.queue, count))
        outs = []
        pushed = {rec.name: x for rec, x in zip(host_inputs, inputs)}
        for rec, parts in zip(outputs, popped):
            if rec.copy_of is not None:  # the device only copies it: the host returns what was pushed
                # (in the output's dtype, which the record only lets differ when a stage before cast it)
                outs.append(pushed[rec.copy_of].to(torch_dtype(rec.dtype), copy=True))
                continue
            outs.append(framework_output(rec.name, from_device_layout(rec, torch.cat(parts)), torch_dtype(rec.dtype)))
        return outs

    def get_parameters(self) -> Dict[str, torch.Tensor]:
        """Current parameter values by framework name."""
        return dict(self._params)

    def update_parameters(self, params: Mapping[str, torch.Tensor]) -> None:
        """Write new parameter values into their queues (formats applied as for the first load).

        Checks every name before writing anything: unknown names, parameters transformed at compile time
        (consteval: their folded value would go stale) and wrong shapes raise InputError.
        """
        for name, value in params.items():
            if name in self._transformed:
                raise InputError(f"parameter '{name}' was transformed at compile time (consteval); "
                                 f"recompile to change it")
            if name not in self._params:
                raise InputError(f"no device parameter named '{name}'")
            rec = self.host_io.queue(name)
            if rec is None or rec.kind != "parameter":
                raise InputError(f"no device parameter named '{name}'")
            if tuple(value.shape) != tuple(self._params[name].shape):
                raise InputError(f"parameter '{name}' has shape {list(self._params[name].shape)}, "
                                 f"got {list(value.shape)}")
        for name, value in params.items():
            self.device.write_ram(name, to_device_layout(self.host_io.queue(name), value,
                                                         rounded=not self.device.fast)[0], owned=True)
            self._params[name] = value.detach().clone()

    def close(self) -> None:
        """Release the simulated device."""
        self.device = None


#: Value range of each integer queue format: the chip saturates beyond it.
_INTEGER_RANGES = {
    DataFormat.Int8: (-(2 ** 7), 2 ** 7 - 1), DataFormat.UInt8: (0, 2 ** 8 - 1), DataFormat.UInt16: (0, 2 ** 16 - 1),
    DataFormat.Int32: (-(2 ** 31), 2 ** 31 - 1), DataFormat.RawUInt8: (0, 2 ** 8 - 1),
    DataFormat.RawUInt16: (0, 2 ** 16 - 1), DataFormat.RawUInt32: (0, 2 ** 32 - 1),
}
#: The golden device carries values through float32 math, where integers are exact up to 2**24.
_FLOAT32_EXACT = exact_integer_bound(DataFormat.Float32)


def framework_output(name: str, value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A device output as its framework tensor's dtype (``dtype``, from the captured graph's output): the
    device's float32 values of a bfloat16 or float16 model come back in that dtype, as the framework would
    return them; integer and boolean outputs go through :func:`integer_output`."""
    if not dtype.is_floating_point and not dtype.is_complex:
        return integer_output(name, value, dtype)
    return value if value.dtype == dtype else value.to(dtype)


def integer_output(name: str, value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A device output of an integer or boolean framework dtype, as that dtype. The compiler puts integer
    data on the device only where it stays integer-valued and exact (:mod:`pybuda.ops.integer`), so each
    value must already be an integer: anything else means the device rounded it (a compiler bug), and is
    refused rather than rounded into a plausible wrong integer."""
    rounded = value.round()
    if not torch.equal(rounded, value):
        bad = (rounded != value).nonzero()[0].tolist()
        raise RuntimeFailure(f"output '{name}' ({str(dtype).replace('torch.', '')}) came back from the device with "
                             f"non-integer value {float(value[tuple(bad)]):g} at index {bad}: its integer data was "
                             f"not kept exact")
    return rounded.to(dtype)


def check_push(rec: Any, value: torch.Tensor, df: Any) -> None:
    """Refuse a framework tensor pushed to input ``rec`` (its queue in format ``df``) that the compiled model would
    turn into a wrong number without an error: integers the chip does not keep exact, values outside the range it
    was compiled for (ids beyond a table), NaN or infinity where its data movement does not carry them."""
    _check_integer_range(rec.name, value, df)
    _check_value_range(rec, value)
    _check_finite(rec, value)


def _check_integer_range(name: str, value: torch.Tensor, df: Any) -> None:
    """Integer data must come back unchanged: beyond its queue's integer format the chip would saturate
    it, and beyond 2**24 the golden device's float32 math would round it (an int64 id of 2**30 + 1 would
    come back as 2**30) — a wrong number with no error either way, so refuse it here."""
    bounds = _INTEGER_RANGES.get(df)
    if bounds is None or value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool \
            or not value.numel():
        return
    lo, hi = int(value.min()), int(value.max())
    low, high = max(bounds[0], -_FLOAT32_EXACT), min(bounds[1], _FLOAT32_EXACT)
    if lo < low or hi > high:
        raise InputError(f"input '{name}' ({str(value.dtype).replace('torch.', '')}) holds values from {lo} to {hi}; "
                         f"its queue is {df.name} and the simulated chip keeps integers exact in [{low}, {high}] "
                         f"({df.name} holds [{bounds[0]}, {bounds[1]}]; its math runs in float32), so they would "
                         f"not come back unchanged")


def _check_value_range(rec: Any, value: torch.Tensor) -> None:
    """Refuse a push outside the range the compiled model is correct for: embedding ids beyond the table
    would select no row on the device (zeros instead of torch's IndexError), and integers beyond what the
    chip keeps exact (a range symmetric around 0, see ``decompose._push_integer_inputs_exact``) would be
    rounded by its float math."""
    for dim, start, stop, low, high, *also in getattr(rec, "value_regions", None) or ():
        if dim < value.dim():
            _refuse_outside(rec, value.narrow(dim, start, stop - start), low, high, f"[{start}:{stop}] along dim {dim} ",
                            also[0] if also else ())
    if rec.value_range is not None:
        _refuse_outside(rec, value, *rec.value_range, "", getattr(rec, "value_also", None) or ())


def _refuse_outside(rec: Any, value: torch.Tensor, low: float, high: float, part: str,
                    also: Sequence[float] = ()) -> None:
    """InputError when ``value`` (``part`` of input ``rec``) holds a value outside ``[low, high]`` that is not
    one of ``also``."""
    if not value.numel() or value.is_complex():  # a range bounds real values (integers, ids)
        return
    lo, hi = value.min(), value.max()
    if lo < low or hi > high:
        outside = (value < low) | (value > high)
        for v in also:
            outside &= value != v
        if not bool(outside.any()):
            return
        integers = not value.dtype.is_floating_point
        show = (lambda v: f"{int(v)}") if integers else (lambda v: f"{float(v):g}")
        first = value[outside].flatten()[0]
        if also:
            lo, hi = value[outside].min(), value[outside].max()
        if low == -(high + 1):  # a lookup whose negative ids count from the end (ONNX Gather, x[ids])
            what = (f"the model was compiled for [{low:g}, {high:g}] (ids of a table of {int(high) + 1} rows, "
                    f"negative ones counting from the end)")
        elif low < 0:
            what = f"the simulated chip keeps integers exact in [{low:.0f}, {high:.0f}], so they would not come back unchanged"
        else:
            what = (f"the model was compiled for [{low:g}, {high:g}] (indices into {int(high) + 1} rows: an embedding's "
                    f"ids, or a lookup's or scatter's indices)")
        if also:
            what += f" (besides {', '.join(show(v) for v in also)}, which the model masks out)"
        raise InputError(f"input '{rec.name}' {part}holds values from {show(lo)} to {show(hi)}; {what}; first value "
                         f"outside: {show(first)}")


def _check_finite(rec: Any, value: torch.Tensor) -> None:
    """Refuse NaN or infinity pushed to an input whose data movement does not carry them (``finite_only``,
    pybuda.passes.lower.specials): a picker multiplies them by its zeros, and whole rows would come back NaN."""
    if not getattr(rec, "finite_only", False) or not value.dtype.is_floating_point or not value.numel():
        return
    bad = ~torch.isfinite(value)
    if bool(bad.any()):
        first = float(value[bad].flatten()[0])
        raise InputError(f"input '{rec.name}' holds {int(bad.sum())} NaN or infinite value(s) (first: {first}), which "
                         f"the compiled model's data movement (slices, gathers, concatenations, windows of a "
                         f"convolution or pool) would not carry exactly: a picker matmul multiplies them by its zeros. "
                         f"Where the compile sample held none, compile with a sample that holds them")


def _tensor(tensors: Mapping[str, torch.Tensor], key: Any, what: str) -> torch.Tensor:
    try:
        return tensors[key]
    except KeyError:
        raise InputError(f"no tensor named '{key}' for {what}: the tensors do not match the host I/O record") from None


def executor_inputs(compile_results: Any) -> Tuple[Any, HostIO, Dict[str, torch.Tensor]]:
    """(netlist, host-I/O record, named tensors) of a compile: all a golden executor reads.

    The tensors are the lowered graph's parameter/constant values and the initial graph's parameters,
    selected by the record's keys.
    """
    netlist = getattr(compile_results, "netlist", None)
    host_io = getattr(compile_results, "host_io", None)
    if netlist is None or host_io is None:
        raise InputError("the compile results hold no netlist: compile to CompileDepth.FULL before running")
    lowered = compile_results.lowered_graph
    framework = compile_results.initial_graph
    tensors = host_io.tensors_from(lowered.tensors if lowered is not None else {},
                                   framework.tensors if framework is not None else {})
    return netlist, host_io, tensors


def create_executor(compile_results, *, microbatch: int = 1, device=None) -> GoldenExecutor:
    """Entry point the runtime calls for ``BackendType.Golden`` TTDevices."""
    config = compile_results.config
    netlist, host_io, tensors = executor_inputs(compile_results)
    return GoldenExecutor(netlist, host_io, tensors, **golden_numerics(config))


def golden_numerics(config: Any) -> Dict[str, bool]:
    """The golden device's numerics switches a compile's config (a CompilerConfig, or an image's stored dict of
    it) asks for: ``fast`` (``golden_ignore_df_precision``) and ``tf32_operands`` (``golden_tf32_operands``)."""
    get = config.get if isinstance(config, Mapping) else (lambda key, default: getattr(config, key, default))
    return {"fast": bool(get("golden_ignore_df_precision", False)),
            "tf32_operands": bool(get("golden_tf32_operands", False))}
