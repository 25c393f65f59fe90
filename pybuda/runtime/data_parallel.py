"""Data parallelism across the two chips of an n300 (``PYBUDA_N300_DATA_PARALLEL=1``), as TT-Buda did it.

A TTDevice on an n300 (``device_config="wh_n300"``, or a Wormhole B0 TTDevice with ``num_chips=2``)
compiles its modules **once**, for one chip and half the microbatch. The placement is then replicated
onto chip 1 (:func:`pybuda.placer.replicate_placement`; the replica's netlist is generated from it, and
both are kept in ``CompileResults.notes["data_parallel"]``). At run time the host splits every push along
dim 0 (the microbatch) into two halves, each chip runs the same netlist on its half, and the host
concatenates the outputs in order: numerics are those of one chip running the whole microbatch.

The performance model (:func:`data_parallel_report`) runs both chips at once on their halves: the device
time per microbatch is one chip's time for half the microbatch, while the host's input and output traffic
(one PCIe link, on chip 0) carries both halves. A model bound by compute therefore runs about twice as
fast as on one chip. Chip 1's share also crosses the card's Ethernet link from chip 0; that hop is faster
than the PCIe link feeding it and overlaps it, so it is not costed separately.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch

from pybuda.errors import ConfigError, InputError

#: Chips of an n300, each running half of the microbatch.
REPLICAS = 2


def data_parallel_requested() -> bool:
    """Whether ``PYBUDA_N300_DATA_PARALLEL`` is set."""
    from pybuda.config import read_env

    return bool(read_env().n300_data_parallel)


@dataclass
class ChipReplica:
    """The compile as chip ``chip_id`` runs it: the replicated placement and the netlist generated from it."""

    chip_id: int
    placer_solution: Any
    netlist: Any


def check_card(device_name: str, card: Any, microbatch: int) -> None:
    """ConfigError unless ``card`` is a two-chip Wormhole B0 card (an n300), InputError unless the microbatch
    splits evenly between its chips."""
    from pybuda.arch.types import BackendDevice

    if card.arch != BackendDevice.Wormhole_B0 or card.chip_count != REPLICAS:
        raise ConfigError(f"PYBUDA_N300_DATA_PARALLEL: TTDevice '{device_name}' compiles for {card.name} "
                          f"({card.arch.value}, {card.chip_count} chip(s)); data parallelism needs an n300: "
                          f"set_configuration_options(device_config='wh_n300'), or a Wormhole B0 TTDevice with "
                          f"num_chips=2")
    if microbatch % REPLICAS:
        raise InputError(f"PYBUDA_N300_DATA_PARALLEL: TTDevice '{device_name}': the microbatch (dim 0 of the inputs) "
                         f"is {microbatch}; each of the {REPLICAS} chips runs half of it, so it must be even")


class DataParallelExecutor:
    """Runs one compiled graph on both chips of the card: each input is split along dim 0 into equal parts,
    one per chip (the same netlist runs each part), and the outputs are concatenated in order. Parameters
    are the same on every chip, so reading and updating them goes to the one executor."""

    def __init__(self, executor: Any, replicas: int = REPLICAS):
        self.executor = executor
        self.replicas = replicas
        self.host_io = getattr(executor, "host_io", None)

    def run(self, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        parts: List[List[torch.Tensor]] = [[] for _ in range(self.replicas)]
        for i, t in enumerate(inputs):
            if t.dim() == 0 or t.shape[0] % self.replicas:
                raise InputError(f"data parallel run: input {i} has shape {list(t.shape)}; dim 0 must split evenly "
                                 f"between {self.replicas} chips")
            for k, piece in enumerate(torch.chunk(t, self.replicas, dim=0)):
                parts[k].append(piece)
        outs = [self.executor.run(p) for p in parts]
        joined = []
        for pieces in zip(*outs):
            joined.append(torch.stack(pieces) if pieces[0].dim() == 0 else torch.cat(pieces, dim=0))
        return joined

    def get_parameters(self) -> Dict[str, torch.Tensor]:
        return self.executor.get_parameters()

    def update_parameters(self, params: Mapping[str, torch.Tensor]) -> None:
        self.executor.update_parameters(params)

    def close(self) -> None:
        close = getattr(self.executor, "close", None)
        if close is not None:
            close()


def replicate_for_chip(results: Any, chip_id: int, card: Any) -> ChipReplica:
    """The compile ``results`` (one chip) placed on chip ``chip_id`` of ``card``, and its netlist."""
    from pybuda.netlist.generate import generate_netlist
    from pybuda.passes.context import CompileContext
    from pybuda.placer import replicate_placement

    placement = replicate_placement(results.placer_solution, chip_id)
    ctx = CompileContext(config=results.config, device=card, microbatch=results.microbatch, graph_name=
                         results.initial_graph.name if results.initial_graph is not None else "graph")
    return ChipReplica(chip_id, placement, generate_netlist(results.lowered_graph, results.balancer_solution,
                                                            placement, ctx))


def compile_data_parallel(modules: Sequence[Any], sample: Sequence[torch.Tensor], config: Any, *, devtype: Any,
                          card: Any, microbatch: int, verify_cfg: Any, input_names: Optional[Sequence[str]],
                          device_name: str) -> Any:
    """Compile ``modules`` once for one chip of ``card`` and half of ``microbatch``, replicate the placement onto
    the other chip, and return a :class:`~pybuda.runtime.backend_api.CompiledArtifact` that runs whole pushes
    (see the module docstring)."""
    from pybuda.arch.descriptor import with_chips
    from pybuda.runtime.backend_api import TensorSpec, compile_modules

    check_card(device_name, card, microbatch)
    half = microbatch // REPLICAS
    cfg = dataclasses.replace(config)
    cfg.num_chips = 1
    halves = [t[: t.shape[0] // REPLICAS] for t in sample]
    artifact = compile_modules(modules, halves, cfg, devtype=devtype, device=with_chips(card, 1), microbatch=half,
                               verify_cfg=verify_cfg, input_names=input_names, compile_for_device=True)
    for stage in artifact.stages:
        stage.executor = DataParallelExecutor(stage.executor)
        results = stage.compile_results
        if results is not None and results.placer_solution is not None and results.lowered_graph is not None:
            results.notes["data_parallel"] = [ChipReplica(0, results.placer_solution, results.netlist)] + [
                replicate_for_chip(results, chip, card) for chip in range(1, REPLICAS)]
    half_outputs = artifact.sample_output_fn
    artifact.sample_output_fn = (lambda: [torch.cat([t] * REPLICAS) if t.dim() else t for t in half_outputs()]) \
        if half_outputs is not None else None
    artifact.input_specs = [TensorSpec(s.name, tuple(t.shape), t.dtype) for s, t in zip(artifact.input_specs, sample)]
    artifact.output_specs = [TensorSpec(s.name, (s.shape[0] * REPLICAS,) + tuple(s.shape[1:]) if s.shape else s.shape,
                                        s.dtype) for s in artifact.output_specs]
    artifact.microbatch = microbatch
    artifact.data_parallel = REPLICAS
    return artifact


def data_parallel_report(report: Any, replicas: int = REPLICAS, card: Any = None) -> Any:
    """The performance of ``replicas`` chips each running ``report``'s netlist (modelled for one chip and its
    share of the microbatch) at the same time: device time per microbatch is one chip's, the host's input,
    output and binary traffic is every chip's (one host link), combined as the estimator combines them."""
    in_c = report.host_input_cycles_per_microbatch * replicas
    out_c = report.host_output_cycles_per_microbatch * replicas
    bin_c = report.host_binary_cycles_per_microbatch * replicas
    device = report.device_cycles_per_microbatch
    host = in_c + out_c + bin_c
    cycles = max(device, host) if report.host_overlapped else max(device + in_c + out_c, host)
    microbatch = report.microbatch * replicas
    first_in = in_c / max(1, microbatch)
    latency = device + first_in + out_c if report.host_overlapped else device + in_c + out_c
    latency = max(latency, bin_c + first_in + out_c)
    seconds = cycles / report.clock_hz
    return dataclasses.replace(
        report, device=str(getattr(card, "name", report.device)), chips=report.chips * replicas, microbatch=microbatch,
        host_input_cycles_per_microbatch=int(in_c), host_output_cycles_per_microbatch=int(out_c),
        host_binary_cycles_per_microbatch=int(bin_c), cycles_per_microbatch=int(cycles),
        seconds_per_microbatch=seconds, samples_per_sec=microbatch / seconds if seconds > 0 else float("inf"),
        latency_s=latency / report.clock_hz)
