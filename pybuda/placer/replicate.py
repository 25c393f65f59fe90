"""A placement copied onto another chip: data parallelism (``PYBUDA_N300_DATA_PARALLEL``), where every chip
of a card runs the same compiled graph on its share of the microbatch."""

from __future__ import annotations

import dataclasses
from typing import Any

from pybuda.errors import CompileError
from pybuda.placer.types import PlacerSolution

STAGE = "BALANCER_PASS"


def replicate_placement(solution: PlacerSolution, chip_id: int) -> PlacerSolution:
    """``solution`` (a single-chip placement) with every op, epoch and queue moved to chip ``chip_id``:
    same cores, epochs, queue blocking, channels and addresses, so the netlist generated from it is the
    original netlist for that chip. A placement spanning several chips is a CompileError (data parallelism
    replicates a one-chip compile)."""
    if not isinstance(chip_id, int) or isinstance(chip_id, bool) or chip_id < 0:
        raise CompileError(f"replicate_placement: chip_id must be a non-negative int, got {chip_id!r}", stage=STAGE)
    chips = {p.chip_id for p in solution.op_placements.values()} | {e.chip_id for e in solution.epochs}
    if len(chips) > 1:
        raise CompileError(f"replicate_placement: the placement spans chips {sorted(chips)}; only a one-chip "
                           f"placement can be replicated", stage=STAGE)

    def moved(item: Any) -> Any:
        return dataclasses.replace(item, chip_id=chip_id)

    return PlacerSolution(
        op_placements={k: moved(p) for k, p in solution.op_placements.items()},
        epochs=[dataclasses.replace(e, chip_id=chip_id, ops=list(e.ops)) for e in solution.epochs],
        queue_placements={k: moved(q) for k, q in solution.queue_placements.items()},
        epoch_to_epoch_queues=list(solution.epoch_to_epoch_queues),
        e2e_queues={k: moved(q) for k, q in solution.e2e_queues.items()},
        chip_order=(chip_id,),
        _e2e_inputs=dict(solution._e2e_inputs),
    )
