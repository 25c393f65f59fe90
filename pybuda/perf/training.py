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
        return (f"training: {self.samples_per_sec:,.1f} samples/s modelled ({self.epochs} epochs; per microbatch "
                f"of {self.microbatch}: forward {fwd / self.clock_hz * 1e3:.2f} ms, backward "
                f"{bwd / self.clock_hz * 1e3:.2f} ms; optimizer {opt / self.clock_hz * 1e3:.2f} ms per step of "
                f"{self.samples_per_step} samples)")


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
                         microbatch_count=microbatch_count, accumulation_steps=accumulation_steps)


def _check_counts(microbatch: int, microbatch_count: int, accumulation_steps: int) -> None:
    for name, value in (("microbatch", microbatch), ("microbatch_count", microbatch_count),
                        ("accumulation_steps", accumulation_steps)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"estimate_training: {name} must be a positive int, got {value!r}")


def training_perf(fwd: Sequence[Any], bwd: Sequence[Any], opt: Any = None, *, microbatch: int,
                  microbatch_count: int = 1, accumulation_steps: int = 1) -> TrainingPerf:
    """A training step from the PerfReports of its forward, backward and optimizer programs."""
    fwd, bwd = list(fwd), list(bwd)
    device = sum(r.device_cycles_per_microbatch for r in fwd + bwd)
    per_microbatch = max(device, fwd[0].host_input_cycles_per_microbatch)
    step = per_microbatch * microbatch_count * accumulation_steps + (opt.device_cycles_per_microbatch if opt else 0)
    return TrainingPerf(fwd, bwd, opt, microbatch, microbatch_count, accumulation_steps, fwd[0].clock_hz,
                        per_microbatch, step)
