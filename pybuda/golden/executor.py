"""Runs a compiled model on the golden backend: the runtime's executor for ``BackendType.Golden``.

It reads only the compile results' netlist, the lowered graph's queue descriptions (where each
framework tensor sits in a queue: ``pybuda.netlist.host_io``) and the tensors of parameter and
constant queues; the model's Python code is not needed. Each push is cut into microbatches of the
compiled ``input_count``; each microbatch is pushed, ``run_fwd_0`` runs once, and the outputs are popped
and turned back into framework tensors.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Mapping, Sequence

import torch

from pybuda.golden.device import GoldenDevice
from pybuda.errors import InputError
from pybuda.netlist.host_io import from_device_layout, to_device_layout

log = logging.getLogger(__name__)

PROGRAM = "run_fwd_0"


class GoldenExecutor:
    """The executor contract of ``pybuda.runtime.backend_api`` on top of a :class:`GoldenDevice`."""

    def __init__(self, compile_results, microbatch: int = 1, fast: bool = False):
        self.results = compile_results
        self.bg = compile_results.lowered_graph
        if compile_results.netlist is None or self.bg is None:
            raise InputError("the compile results hold no netlist: compile to CompileDepth.FULL before running")
        self.device = GoldenDevice(compile_results.netlist, fast=fast)
        self.microbatch = max(1, int(compile_results.netlist.graphs[next(iter(compile_results.netlist.graphs))]
                                     .input_count))
        graph = compile_results.initial_graph
        self.input_queues = _match_names([n.name for n in graph.inputs], list(self.bg.input_order), "input")
        self.output_queues = list(self.bg.output_order)
        self.output_dtypes = [n.dtype for n in graph.outputs]
        self._params: Dict[str, torch.Tensor] = {n.name: graph.tensors[n.name] for n in graph.parameters
                                                 if n.name in graph.tensors}
        for name, queue in self.bg.queues.items():
            if queue.kind in ("parameter", "constant"):
                self.device.write_ram(name, to_device_layout(queue, self.bg.tensors[name])[0])

    def run(self, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        if len(inputs) != len(self.input_queues):
            raise InputError(f"the compiled model takes {len(self.input_queues)} input(s), got {len(inputs)}")
        device_inputs = [to_device_layout(self.bg.queues[q], x) for q, x in zip(self.input_queues, inputs)]
        entries = device_inputs[0].shape[0] if device_inputs else self.microbatch
        if entries % self.microbatch:
            raise InputError(f"pushed {entries} samples; the model was compiled for microbatches of "
                             f"{self.microbatch}, so pushes must be a multiple of it")
        popped: List[List[torch.Tensor]] = [[] for _ in self.output_queues]
        for start in range(0, entries, self.microbatch):
            for q, data in zip(self.input_queues, device_inputs):
                self.device.push(q, data[start:start + self.microbatch])
            self.device.run_program(PROGRAM, {"$p_loop_count": 1})
            for i, q in enumerate(self.output_queues):
                count = self.microbatch if self.bg.queues[q].tags.get("batched") else 1
                popped[i].append(self.device.pop(q, count))
        outs = []
        for q, parts, dtype in zip(self.output_queues, popped, self.output_dtypes):
            value = from_device_layout(self.bg.queues[q], torch.cat(parts))
            outs.append(value if dtype.is_floating_point else value.round().to(dtype))
        return outs

    def get_parameters(self) -> Dict[str, torch.Tensor]:
        return dict(self._params)

    def update_parameters(self, params: Mapping[str, torch.Tensor]) -> None:
        """Write new parameter values into their queues (formats applied as for the first load)."""
        for name, value in params.items():
            queue = self.bg.queues.get(name)
            if name not in self._params or queue is None or queue.kind != "parameter":
                raise InputError(f"no device parameter named '{name}'")
            if tuple(value.shape) != tuple(self._params[name].shape):
                raise InputError(f"parameter '{name}' has shape {list(self._params[name].shape)}, "
                                 f"got {list(value.shape)}")
            if name in self.results.consteval_trace:
                raise InputError(f"parameter '{name}' was transformed at compile time (consteval); "
                                 f"recompile to change it")
        for name, value in params.items():
            self.device.write_ram(name, to_device_layout(self.bg.queues[name], value)[0])
            self._params[name] = value.detach().clone()

    def close(self) -> None:
        self.device = None


def _match_names(graph_names: List[str], queue_names: List[str], what: str) -> List[str]:
    """Queue of each graph input: by name, else by position (lowering keeps the order)."""
    if len(graph_names) != len(queue_names):
        raise InputError(f"compiled model has {len(queue_names)} {what} queue(s) for {len(graph_names)} graph {what}(s)")
    return [g if g in queue_names else q for g, q in zip(graph_names, queue_names)]


def create_executor(compile_results, *, microbatch: int = 1, device=None) -> GoldenExecutor:
    """Entry point the runtime calls for ``BackendType.Golden`` TTDevices."""
    config = compile_results.config
    fast = bool(getattr(config, "golden_ignore_df_precision", False))
    return GoldenExecutor(compile_results, microbatch=microbatch, fast=fast)
