"""The placer: ops onto chips, epochs and worker-grid rectangles; queues into host memory and DRAM
(spec §4.5). Entry point: :func:`place`; :func:`replicate_placement` copies a one-chip placement onto
another chip (data parallelism)."""

from pybuda.placer.types import (  # noqa: F401
    EpochInfo, EpochToEpochQueue, OpPlacement, PlacerSolution, QueuePlacement,
)
from pybuda.balancer.packing import GridPacker, count_epochs  # noqa: F401
from pybuda.placer.placer import chip_order, place  # noqa: F401
from pybuda.placer.dram import DRAM_RESERVED_BYTES, QUEUE_HEADER_BYTES, place_queues  # noqa: F401
from pybuda.placer.replicate import replicate_placement  # noqa: F401
