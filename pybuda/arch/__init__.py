"""Device descriptors (grid, harvesting, L1, DRAM, clocks) and the backend enums."""

from pybuda.arch.types import BackendDevice, BackendType  # noqa: F401
from pybuda.arch.tiles import (  # noqa: F401
    DEFAULT_TILE_DIM, LEGAL_TILE_DIMS, TINY_TILE_DIMS, is_legal_tile_dim, tile_size_bytes,
)
from pybuda.arch.descriptor import (  # noqa: F401
    NETLIST_ARCH_NAMES, PRESETS, DeviceDescriptor, DramChannel, arch_from_netlist_name,
    device_config_names, get_device_descriptor, harvested_noc_cols, harvested_noc_rows,
    harvesting_mask_from_noc_rows, netlist_arch_name, with_chips,
)
