"""Modelled training throughput: the forward, backward and optimizer programs of a training compile together.

TT-Buda runs a training step as ``accumulation_steps * microbatch_count`` forward and backward passes over
microbatches (``run_fwd``/``run_bwd`` programs) and one optimizer pass (``run_opt``). Each program is
modelled by :func:`pybuda.perf.model.estimate_compiled`. Activations saved for the backward, gradients
between devices and accumulated gradients stay in device DRAM on the card (TT-Buda's intermediate and
accumulation queues), so only the forward's inputs cross PCIe, overlapping device work as in inference;
the host transfers that the separate compiles of the programs model for their other queues are left out.
:func:`estimate_training_netlist` models the programs of a device's one training netlist instead, where
those queues are device queues in the netlist itself: what a TTDevice runs
(:meth:`pybuda.runtime.tt_trainer.TTTrainer.performance`) and what ``pybuda benchmark -t`` models
(:func:`pybuda.runtime.training_netlist.model_training`). :func:`estimate_training` remains for programs
compiled apart (a device whose programs could not be merged).

In a training netlist, whatever still crosses the host is charged as the inference model charges a
program's host I/O (each program's ``host_input`` / ``host_output`` cycles: tilize or untilize plus PCIe):
saved activations popped after the forward and pushed before the backward, gradients popped after every
backward (the host accumulates them) and pushed to the optimizer, loss outputs. One host thread does all
of it; a program whose host queues are too shallow for the host to work ahead waits for its transfers
(``host_overlapped`` false). The programs of one step share the chip's binary cache: when the forward,
backward and optimizer epochs together exceed its slots, the host re-writes every epoch's binaries on
each switch, as the inference model charges one program that overflows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence

from pybuda.errors import ConfigError


@dataclass
class TrainingPerf:
    """Modelled training speed of one device's programs."""

    forward: List[Any]  # PerfReport per forward program (model, then loss)
    backward: List[Any]  # PerfReport per backward program
    optimizer: Optional[Any]  # PerfReport of the optimizer program (None without an optimizer)
    microbatch: int
    microbatch_count: int
    accumulation_steps: int
    clock_hz: float
    cycles_per_microbatch: float  # forward + backward of one microbatch
    cycles_per_step: float  # every microbatch of a step, then the optimizer
    #: Host work per microbatch (tilize/untilize, PCIe, binary re-writes) of the forward and backward programs,
    #: and per step of the optimizer program: charged for a training netlist only (see the module docstring).
    host_cycles_per_microbatch: float = 0.0
    host_cycles_per_step: float = 0.0

    @property
    def samples_per_step(self) -> int:
        return self.microbatch * self.microbatch_count * self.accumulation_steps

    @property
    def seconds_per_step(self) -> float:
        return self.cycles_per_step / self.clock_hz

    @property
    def samples_per_sec(self) -> float:
        """Steady-state training throughput (samples per second) on the card."""
        return self.samples_per_step / self.seconds_per_step

    @property
    def epochs(self) -> int:
        """Temporal epochs over all programs (forward, backward and optimizer never share one)."""
        reports = self.forward + self.backward + ([self.optimizer] if self.optimizer is not None else [])
        return sum(r.num_epochs for r in reports)

    def summary(self) -> str:
        fwd = sum(r.device_cycles_per_microbatch for r in self.forward)
        bwd = sum(r.device_cycles_per_microbatch for r in self.backward)
        opt = self.optimizer.device_cycles_per_microbatch if self.optimizer is not None else 0
        host = ""
        if self.host_cycles_per_microbatch or self.host_cycles_per_step:
            host = (f"; host {self.host_cycles_per_microbatch / self.clock_hz * 1e3:.2f} ms per microbatch, "
                    f"{self.host_cycles_per_step / self.clock_hz * 1e3:.2f} ms per optimizer step")
        return (f"training: {self.samples_per_sec:,.1f} samples/s modelled ({self.epochs} epochs; per microbatch "
                f"of {self.microbatch}: forward {fwd / self.clock_hz * 1e3:.2f} ms, backward "
                f"{bwd / self.clock_hz * 1e3:.2f} ms; optimizer {opt / self.clock_hz * 1e3:.2f} ms per step of "
                f"{self.samples_per_step} samples{host})")


def estimate_training(forward: Sequence[Any], backward: Sequence[Any], optimizer: Any = None, *,
                      microbatch: int, microbatch_count: int = 1, accumulation_steps: int = 1) -> TrainingPerf:
    """Model a training step from the compile results of its programs (see the module docstring).

    ``forward``/``backward``: CompileResults of each module's forward and backward program; ``optimizer``:
    the optimizer program's, or None. ``microbatch``: samples per forward/backward pass.
    """
    from pybuda.perf.model import estimate_compiled

    _check_counts(microbatch, microbatch_count, accumulation_steps)
    if not forward or len(forward) != len(backward):
        raise ConfigError("estimate_training needs one backward program per forward program (and at least one)")
    fwd = [estimate_compiled(r, microbatch=microbatch) for r in forward]
    bwd = [estimate_compiled(r, microbatch=microbatch) for r in backward]
    opt = estimate_compiled(optimizer, microbatch=1) if optimizer is not None else None
    return training_perf(fwd, bwd, opt, microbatch=microbatch, microbatch_count=microbatch_count,
                         accumulation_steps=accumulation_steps)


def estimate_training_netlist(netlist: Any, device: Any, forward: Sequence[str], backward: Sequence[str],
                              optimizer: Optional[str] = None, *, microbatch: int, microbatch_count: int = 1,
                              accumulation_steps: int = 1,
                              temporal_epochs: Optional[Mapping[str, int]] = None) -> TrainingPerf:
    """Model a training step from one training netlist (:mod:`pybuda.netlist.training`): its programs
    ``forward`` / ``backward`` (program names, one per module) and ``optimizer`` run on ``device``.
    ``temporal_epochs``: graph name -> temporal epoch, as the placer grouped each program's graphs."""
    from pybuda.perf.model import estimate

    _check_counts(microbatch, microbatch_count, accumulation_steps)
    if not forward or len(forward) != len(backward):
        raise ConfigError("estimate_training_netlist needs one backward program per forward program (and at least one)")

    def run(program: str, mb: int) -> Any:
        return estimate(netlist, device, microbatch=mb, program=program, temporal_epochs=temporal_epochs)

    return training_perf([run(p, microbatch) for p in forward], [run(p, microbatch) for p in backward],
                         run(optimizer, 1) if optimizer is not None else None, microbatch=microbatch,
                         microbatch_count=microbatch_count, accumulation_steps=accumulation_steps, host_io=True)


def _check_counts(microbatch: int, microbatch_count: int, accumulation_steps: int) -> None:
    for name, value in (("microbatch", microbatch), ("microbatch_count", microbatch_count),
                        ("accumulation_steps", accumulation_steps)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"estimate_training: {name} must be a positive int, got {value!r}")


def training_perf(fwd: Sequence[Any], bwd: Sequence[Any], opt: Any = None, *, microbatch: int,
                  microbatch_count: int = 1, accumulation_steps: int = 1, host_io: bool = False) -> TrainingPerf:
    """A training step from the PerfReports of its forward, backward and optimizer programs.

    ``host_io`` False (programs compiled apart): only the forward's inputs cross the host, overlapping the
    device. True (the programs of one training netlist): every program's host I/O and the binary re-writes
    of a shared cache that overflows are charged (see the module docstring)."""
    fwd, bwd = list(fwd), list(bwd)
    count = microbatch_count * accumulation_steps
    if not host_io:
        device = sum(r.device_cycles_per_microbatch for r in fwd + bwd)
        per_microbatch = max(device, fwd[0].host_input_cycles_per_microbatch)
        step = per_microbatch * count + (opt.device_cycles_per_microbatch if opt else 0)
        return TrainingPerf(fwd, bwd, opt, microbatch, microbatch_count, accumulation_steps, fwd[0].clock_hz,
                            per_microbatch, step)
    overflow = _cache_overflows(fwd + bwd + ([opt] if opt is not None else []))
    per_microbatch, host_mb = _programs_cycles(fwd + bwd, overflow)
    opt_cycles, host_step = _programs_cycles([opt], overflow) if opt is not None else (0.0, 0.0)
    return TrainingPerf(fwd, bwd, opt, microbatch, microbatch_count, accumulation_steps, fwd[0].clock_hz,
                        per_microbatch, per_microbatch * count + opt_cycles, host_mb, host_step)


def _cache_overflows(reports: Sequence[Any]) -> bool:
    """True when the programs together run more distinct epochs on a chip than its binary cache holds."""
    distinct: dict = {}
    for r in reports:
        for e in r.epochs:
            for chip in e.chips:  # a multi-chip epoch counts each of its graphs on every chip: an upper bound
                distinct.setdefault(chip, set()).update(e.graphs)
    slots = reports[0].config.binary_cache_slots if reports else 0
    return any(len(graphs) > slots for graphs in distinct.values())


def _programs_cycles(reports: Sequence[Any], overflow: bool) -> tuple:
    """(cycles, host cycles) of running ``reports``' programs once each, back to back, as the inference model
    runs one program: one host thread does every program's tilize/untilize and PCIe transfers and (with
    ``overflow``) re-writes each epoch's binaries; a program whose host I/O cannot work ahead waits for it."""
    device = host = 0.0
    for r in reports:
        io = r.host_input_cycles_per_microbatch + r.host_output_cycles_per_microbatch
        device += r.device_cycles_per_microbatch + (0 if r.host_overlapped else io)
        binaries = sum(e.binary_bytes if overflow else e.host_binary_bytes for e in r.epochs)
        host += io + binaries / (r.config.host_binary_write_bytes_per_s / r.clock_hz)
    return max(device, host), host
