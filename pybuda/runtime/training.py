"""Training on the simulated chip: the forward, backward and optimizer programs of a pipeline of devices.

``initialize_pipeline(training=True)`` builds a :class:`TrainingSession` over the pipeline (the user's
devices plus the CPU-fallback devices a split PyTorch model needs). Each device gets a trainer:

* a **TTDevice** compiles every module placed on it (and its loss module, last) into three programs, as
  TT-Buda did: the forward graph (which also returns the activations the backward needs), the backward
  graph (:func:`pybuda.passes.graph.autograd.build_training_graphs`) and one optimizer graph over all its
  trainable parameters (:meth:`pybuda.optimizers.Optimizer.build_update_graph`). Each is compiled by
  :func:`pybuda.compile.compile_graph` (lowered, balanced and placed in its own epochs), and the netlists
  are merged into **one training netlist** for the device (:mod:`pybuda.netlist.training`): programs
  ``run_fwd_K`` / ``run_bwd_K`` / ``run_opt_0``, parameters in ram queues that the forward and backward read
  and the optimizer writes, saved activations in DRAM queues from forward to backward, and gradient
  accumulation queues (``gradient_op``, in the accumulate format, zeroed by ``$p_zero_grad`` on the first
  microbatch after ``zero_grad``) that the optimizer reads. The golden device runs that netlist; the host
  pushes only inputs, targets and the gradients arriving from the next device, and pops only outputs,
  losses and input gradients. Where two programs hold a tensor in layouts no TM on the device can
  reconcile, that hand-off goes through the host instead (the report says how many gradients and
  parameters stay on the device). A program the compiler cannot place runs on the CPU reference instead,
  with a line in :attr:`TTTrainer.report`; its gradients are accumulated on the host in the accumulate
  format (Float32 where the compile is Float32, else Float16_b).
* a **CPUDevice** runs its torch modules (and CPU-fallback stages) with torch autograd; its
  ``optimizer_f`` builds a torch optimizer over them (fallback stages use the TTDevice optimizer's
  ``get_pytorch_optimizer``). Gradients cross the device boundary both ways: a device's backward gets the
  gradients of its outputs from the next device and returns those of its inputs to the previous one.

Modules: :mod:`pybuda.runtime.training_programs` (compiling a program), :mod:`pybuda.runtime.training_netlist`
(the training netlist's links, device and modelled speed), :mod:`pybuda.runtime.tt_trainer` and
:mod:`pybuda.runtime.host_trainer` (the two trainers); this module holds the session the run API drives.

Training runs sequentially in the calling thread (the simulated chip has no concurrency to overlap).
Every microbatch's forward context waits in a FIFO until its backward; ``run_backward`` without a
forward waiting is an error in the caller, and so is asking for more inputs or targets than were pushed.
"""

from __future__ import annotations

import logging
import queue
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Set

import torch

from pybuda.errors import ConfigError, InputError, ModuleError, PybudaError
from pybuda.runtime.backend_api import fold_microbatch
from pybuda.runtime.device import Device, InputItem
# The trainers and program helpers live in their own modules; their public names stay importable from here.
from pybuda.runtime.host_trainer import HostTrainer
from pybuda.runtime.training_netlist import (NetlistProgram, TrainingDevice, assemble_training_netlist,
                                             describe_training_netlist, host_handoffs, model_training,
                                             model_training_step, training_links, training_netlist_performance)
from pybuda.runtime.training_programs import (Program, _add_sample_dim, accumulate_format, compile_optimizer,
                                              compile_program, compile_stage, gradient_layouts,
                                              junk_padded_gradients)
from pybuda.runtime.tt_trainer import TTTrainer

log = logging.getLogger(__name__)

__all__ = ["HostTrainer", "NetlistProgram", "Program", "TTTrainer", "TrainingDevice", "TrainingSession",
           "accumulate_format", "assemble_training_netlist", "close", "compile_optimizer", "compile_program",
           "compile_stage", "current", "describe_training_netlist", "gradient_layouts", "host_handoffs",
           "junk_padded_gradients", "model_training", "model_training_step", "new_queue", "start",
           "training_links", "training_netlist_performance", "_add_sample_dim"]


# --- the session ----------------------------------------------------------------------------------------------------


@dataclass
class TrainingSession:
    """The devices of a training pipeline, their trainers and the forwards waiting for a backward."""

    devices: List[Device]
    trainers: List[Any]
    output_queue: Any
    checkpoint_queue: Any
    loss_queue: Any = None
    pending: Deque[List[Any]] = field(default_factory=deque)
    optimizer_steps: int = 0
    closed: bool = False

    @property
    def first(self) -> Device:
        return self.devices[0]

    def require_inputs(self, count: int, func: str) -> None:
        """InputError unless ``count`` inputs (and targets, with a loss module) are pushed and waiting."""
        src = self.first
        if src._staging.qsize() < count:
            raise InputError(f"{func} needs {count} input(s) but {src._staging.qsize()} are pushed to '{src.name}'; "
                             f"push each microbatch with push_to_inputs first")
        loss_trainer = self._loss_trainer()
        if loss_trainer is not None and loss_trainer.device._targets.qsize() < count:
            raise InputError(f"{func} needs {count} target(s) but {loss_trainer.device._targets.qsize()} are pushed "
                             f"to '{loss_trainer.device.name}'; push one per input with push_to_target_inputs")

    def forward(self, count: int) -> None:
        """Run ``count`` pushed inputs forward; each waits for its backward."""
        _check_count("run_forward", count)
        self.require_inputs(count, f"run_forward({count})")
        for trainer in self.trainers:
            if isinstance(trainer, TTTrainer):
                trainer.check_room(len(self.pending) + count)
        loss_trainer = self._loss_trainer()
        src = self.first
        for _ in range(count):
            item = src._staging.get_nowait()
            values: List[torch.Tensor] = list(item.tensors)
            contexts = []
            for trainer in self.trainers:
                targets = trainer.device._targets.get_nowait().tensors if trainer.has_loss else None
                values, ctx = trainer.forward(values, targets)
                contexts.append(ctx)
            self.pending.append(contexts)
            from pybuda.tensor import Tensor

            outs = [Tensor.create_from_torch(v) for v in values]
            if loss_trainer is not None and self.loss_queue is not None:
                self.loss_queue.put(outs)
            self.output_queue.put(outs)

    def backward(self, count: int, zero_grad: bool) -> None:
        """Run the backward of the ``count`` oldest forwards, accumulating gradients."""
        _check_count("run_backward", count)
        if self._loss_trainer() is None:
            raise PybudaError("run_backward: the pipeline has no loss module; place one on the last device with "
                              "place_loss_module")
        if len(self.pending) < count:
            raise PybudaError(f"run_backward({count}): {len(self.pending)} forward(s) wait for a backward; call "
                              f"run_forward first (each run_backward input needs its run_forward)")
        if zero_grad:
            for t in self.trainers:
                t.zero_grad()
        for _ in range(count):
            contexts = self.pending.popleft()
            grads: Optional[List[Any]] = None
            for trainer, ctx in zip(reversed(self.trainers), reversed(contexts)):
                grads = trainer.backward(ctx, grads)

    def optimizer(self, checkpoint: bool) -> None:
        for t in self.trainers:
            t.step()
        self.optimizer_steps += 1
        if checkpoint and self.checkpoint_queue is not None:
            self.checkpoint_queue.put(self.checkpoint())

    def schedulers(self) -> None:
        for t in self.trainers:
            if isinstance(t, TTTrainer):
                scheduler = getattr(t.device, "scheduler", None)
                if scheduler is not None:
                    scheduler.step()
                    t.refresh_hyperparameters()
            elif t.scheduler is not None:
                t.scheduler.step()

    def checkpoint(self) -> List[Dict[str, Any]]:
        from pybuda.tensor import Tensor

        return [{k: Tensor.create_from_torch(v) for k, v in self.parameters_of(t.device).items()}
                for t in self.user_trainers()]

    def trainers_of(self, device: Device) -> List[Any]:
        """The trainer of ``device`` and those of its CPU-fallback stages: the host parts of a split model belong
        to the module the user placed on ``device``, so its checkpoints, gradients and updates cover them."""
        return [self.trainer_of(device)] + [t for t in self.trainers
                                            if getattr(t.device, "_fallback_of", None) is device]

    def parameters_of(self, device: Device) -> Dict[str, torch.Tensor]:
        """Current values of every trainable parameter of ``device``'s modules (fallback stages included)."""
        values: Dict[str, torch.Tensor] = {}
        for t in self.trainers_of(device):
            values.update(t.parameters())
        return values

    def grads_of(self, device: Device) -> Dict[str, torch.Tensor]:
        """The accumulated gradients of ``device``'s parameters (fallback stages included)."""
        grads: Dict[str, torch.Tensor] = {}
        for t in self.trainers_of(device):
            grads.update(t.grads)
        return grads

    def set_parameters_of(self, device: Device, values: Mapping[str, torch.Tensor]) -> None:
        """New values of ``device``'s parameters, each to the trainer that holds it (fallback stages included);
        a name none of them holds is an InputError naming every parameter there is."""
        trainers = self.trainers_of(device)
        owner = {name: t for t in trainers for name in t.parameter_names()}
        unknown = sorted(set(values) - set(owner))
        if unknown:
            raise InputError(f"device '{device.name}' has no trainable parameter(s) {unknown}; it has {sorted(owner)}")
        for t in trainers:
            mine = {k: v for k, v in values.items() if owner[k] is t}
            if mine:
                t.set_parameters(mine)

    def user_trainers(self) -> List[Any]:
        return [t for t in self.trainers if getattr(t.device, "_fallback_of", None) is None]

    def trainer_of(self, device: Device) -> Any:
        for t in self.trainers:
            if t.device is device:
                return t
        raise PybudaError(f"device '{device.name}' is not in the training pipeline")

    def _loss_trainer(self) -> Any:
        last = self.trainers[-1]
        return last if last.has_loss else None


def _check_count(func: str, count: int) -> None:
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise InputError(f"{func}: the input count must be a positive int, got {count!r}")


# --- building a session -------------------------------------------------------------------------------------------------


_current: Optional[TrainingSession] = None


def current() -> Optional[TrainingSession]:
    """The running training session, if any."""
    return _current if _current is not None and not _current.closed else None


def close() -> None:
    global _current
    if _current is not None:
        _current.closed = True
    _current = None


def start(devices: Sequence[Device], config: Any, output_queue: Any, checkpoint_queue: Any,
          sample_targets: Sequence[Any] = ()) -> TrainingSession:
    """Compile every device of ``devices`` (the translated pipeline) for training and make the session current."""
    global _current
    from pybuda.runtime.ttdevice import TTDevice

    close()
    for k, d in enumerate(devices):
        if d.loss_module is not None and k != len(devices) - 1 and devices[k + 1]._fallback_of is not d:
            raise ModuleError(f"device '{d.name}' holds loss module '{d.loss_module.name}' but is not the last device "
                              f"of the pipeline ({' -> '.join(x.name for x in devices)}); the loss runs on the last device")
    last = devices[-1]
    if last.loss_module is None and not any(d.loss_module is not None for d in devices):
        log.info("training pipeline without a loss module: run_backward will need one")
    if sample_targets:
        from pybuda.runtime.device import normalize_push

        item = normalize_push(tuple(sample_targets), last.name)
        holder = _loss_holder(devices)
        if holder is not None and holder._first_targets is None:
            holder._first_targets = item
    item = devices[0].first_input_item()
    # The user's push sets the microbatch; a CPU stage's outputs hold its samples folded along dim 0.
    microbatch = item.microbatch
    tt_optimizer = None
    trainers: List[Any] = []
    stepped: Set[int] = set()  # parameters some host trainer's optimizer steps (HostTrainer's ``stepped``)
    for k, d in enumerate(devices):
        owner = d._fallback_of
        optimizer_owner = getattr(owner, "optimizer", None) if owner is not None else None
        targets = d._first_targets if d.loss_module is not None else None
        if d.loss_module is not None and targets is None:
            raise InputError(f"device '{d.name}' holds loss module '{d.loss_module.name}': push targets with "
                             f"push_to_target_inputs or pass sample_targets to initialize_pipeline")
        if isinstance(d, TTDevice):
            trainer = TTTrainer(d, item, targets, config, needs_input_grads=k > 0, microbatch=microbatch)
            tt_optimizer = tt_optimizer or d.optimizer
            item = InputItem(tuple(fold_microbatch([trainer.sample_outputs] * trainer.microbatch))) \
                if trainer.sample_outputs else None
        else:
            trainer = HostTrainer(d, item, targets, optimizer_owner, stepped)
            item = InputItem(tuple(trainer.sample_outputs))
        trainers.append(trainer)
    # CPU-fallback stages of a TTDevice train with its optimizer: the pre device was built before it.
    for t in trainers:
        if isinstance(t, HostTrainer) and t.optimizer is None and t.device._fallback_of is not None:
            opt = getattr(t.device._fallback_of, "optimizer", None)
            if opt is not None:
                t.set_optimizer(opt)
    _current = TrainingSession(list(devices), trainers, output_queue, checkpoint_queue)
    _check_optimized_names(_current)
    return _current


def _check_optimized_names(session: TrainingSession) -> None:
    """ConfigError when a TTDevice's optimizer was given a parameter name its modules (CPU-fallback stages
    included) do not have: a misspelt name would otherwise leave that parameter untrained without a word."""
    from pybuda.runtime.training_programs import optimizer_parameter_names

    for device in session.devices:
        if getattr(device, "_fallback_of", None) is not None:
            continue
        optimizer = getattr(device, "optimizer", None)
        wanted = optimizer_parameter_names(optimizer)
        if wanted is None:
            continue
        have = {n for t in session.trainers_of(device) for n in t.parameter_names()}
        unknown = sorted(wanted - have)
        if unknown:
            close()
            raise ConfigError(f"{type(optimizer).__name__} of device '{device.name}' was given parameter(s) {unknown} "
                              f"that its modules do not train; trainable parameters: {sorted(have)}")


def _loss_holder(devices: Sequence[Device]) -> Optional[Device]:
    for d in devices:
        if d.loss_module is not None:
            return d
    return None


def new_queue() -> "queue.Queue[Any]":
    from pybuda.runtime.transport import OutputQueue

    return OutputQueue()
