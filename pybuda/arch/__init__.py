"""Device descriptors (grid, harvesting, L1, DRAM, clocks) and the backend enums."""

from pybuda.arch.types import BackendDevice, BackendType  # noqa: F401
