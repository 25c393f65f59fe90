"""Device and cluster descriptors as YAML (spec §5.1: BBE's ``device/*.yaml`` and ``cluster_desc.yaml``).

:func:`device_desc_yaml` writes every field of a :class:`~pybuda.arch.DeviceDescriptor`: the ones BBE's
device files have under BBE's names (``grid``, ``arc``, ``pcie``, ``dram``, ``eth``, ``functional_workers``,
``harvested_workers``, ``worker_l1_size``, ``dram_bank_size``, ``eth_l1_size``, ``arch_name``), NoC
coordinates spelled ``"x-y"``, and the rest of our descriptor under ``pybuda:`` so that
:func:`read_device_descriptor` gives back an equal descriptor. The reader uses ``yaml.safe_load`` only
(device images are untrusted) and checks that the fields agree with each other.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

import yaml

from pybuda.arch import BackendDevice, DeviceDescriptor, DramChannel, harvested_noc_cols, harvested_noc_rows
from pybuda.errors import ConfigError

__all__ = ["device_desc_yaml", "read_device_descriptor", "device_desc_dict", "device_from_dict",
           "cluster_desc_yaml", "cluster_desc_dict", "GALAXY_SHAPE"]

XY = Tuple[int, int]

#: BBE's arch_name spelling per arch.
_ARCH_NAMES = {BackendDevice.Grayskull: "GRAYSKULL", BackendDevice.Wormhole_B0: "WORMHOLE_B0",
               BackendDevice.Blackhole: "BLACKHOLE"}

#: Descriptor fields written under ``pybuda:`` (everything BBE's device file has no key for), with the
#: Python type each must have when read back.
_EXTRA_FIELDS: Dict[str, type] = {
    "name": str, "chip_count": int, "aiclk_hz": float, "harvesting_mask": int,
    "l1_data_buffer_base_bytes": int, "l1_pipegen_reserved_bytes": int, "l1_dram_io_reserved_bytes": int,
    "dest_tiles_16bit": int, "dram_blocks_per_channel": int, "dram_bw_per_block_theoretical_gib_s": float,
    "dram_bw_per_block_measured_gib_s": float, "noc_bytes_per_cycle": int, "pcie_bytes_per_s": float,
    "pcie_bytes_per_cycle_observed": float, "eth_link_gib_per_s": float, "eth_derate": float,
    "host_memory_channels": int, "fpu_flops_per_cycle": int, "max_dram_in_queues": int,
    "max_dram_out_queues": int,
}
_EXTRA_LISTS = ("worker_noc_xs", "worker_noc_ys", "harvested_noc_rows", "harvested_noc_cols",
                "supported_tile_dims", "published_tflops")
_TOP_KEYS = ("arch_name", "grid", "arc", "pcie", "dram", "dram_bank_size", "eth", "functional_workers",
             "harvested_workers", "worker_l1_size", "eth_l1_size", "pybuda")

#: Galaxy chips form a 4x8 mesh (spec §5.1 "Multichip": PyBuda device_config.hpp).
GALAXY_SHAPE = (4, 8)


def _xy_text(xy: Sequence[int]) -> str:
    return f"{int(xy[0])}-{int(xy[1])}"


def device_desc_dict(desc: DeviceDescriptor) -> Dict[str, Any]:
    """The descriptor as the plain mapping :func:`device_desc_yaml` dumps."""
    workers = [_xy_text((x, y)) for y in desc.worker_noc_ys for x in desc.worker_noc_xs]
    harvested = [_xy_text((x, y)) for y in desc.harvested_noc_rows for x in desc.worker_noc_xs] + \
        [_xy_text((x, y)) for x in desc.harvested_noc_cols for y in desc.worker_noc_ys]
    sizes = {ch.size_bytes for ch in desc.dram_channels}
    extra: Dict[str, Any] = {k: getattr(desc, k) for k in _EXTRA_FIELDS}
    extra["aiclk_hz"] = float(desc.aiclk_hz)
    extra.update({
        "worker_noc_xs": list(desc.worker_noc_xs), "worker_noc_ys": list(desc.worker_noc_ys),
        "harvested_noc_rows": list(desc.harvested_noc_rows), "harvested_noc_cols": list(desc.harvested_noc_cols),
        "supported_tile_dims": [list(d) for d in desc.supported_tile_dims],
        "published_tflops": [[str(k), float(v)] for k, v in desc.published_tflops],
    })
    # BBE has one dram_bank_size per device; a descriptor with unequal channels keeps them per channel
    if len(sizes) > 1:
        extra["dram_channel_sizes"] = [ch.size_bytes for ch in desc.dram_channels]
    return {
        "arch_name": _ARCH_NAMES[desc.arch],
        "grid": {"x_size": int(desc.noc_grid[0]), "y_size": int(desc.noc_grid[1])},
        "arc": [_xy_text(c) for c in desc.arc_cores],
        "pcie": [_xy_text(c) for c in desc.pcie_cores],
        "dram": [[_xy_text(e) for e in ch.noc_endpoints] for ch in desc.dram_channels],
        "dram_bank_size": int(next(iter(sizes))) if sizes else 0,
        "eth": [_xy_text(c) for c in desc.eth_cores],
        "functional_workers": workers,
        "harvested_workers": harvested,
        "worker_l1_size": int(desc.l1_size_bytes),
        "eth_l1_size": int(desc.eth_l1_size_bytes),
        "pybuda": extra,
    }


def device_desc_yaml(desc: DeviceDescriptor) -> str:
    """``device_desc.yaml`` of ``desc``: grid size, worker/DRAM/Ethernet/PCIe/ARC NoC coordinates
    ("x-y"), harvesting, L1 size, DRAM channels and bank size, clock and arch name."""
    return yaml.safe_dump(device_desc_dict(desc), sort_keys=False, default_flow_style=None, width=120)


# --------------------------------------------------------------------------------------------------
# Reading back (strict: every key known, every type checked, the fields consistent)
# --------------------------------------------------------------------------------------------------

def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"device descriptor {where}: {message}")


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"expected an integer, got {type(value).__name__}")
    return value


def _float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(where, f"expected a number, got {type(value).__name__}")
    return float(value)


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _fail(where, f"expected a string, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> List[Any]:
    if not isinstance(value, list):
        raise _fail(where, f"expected a list, got {type(value).__name__}")
    return value


def _map(value: Any, where: str, keys: Sequence[str], optional: Sequence[str] = ()) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"expected a mapping, got {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in keys and k not in optional)
    if unknown:
        raise _fail(where, f"unknown key(s) {unknown}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise _fail(where, f"missing key(s) {missing}")
    return value


def _parse_xy(value: Any, where: str) -> XY:
    text = _str(value, where)
    parts = text.split("-")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise _fail(where, f"expected a NoC coordinate 'x-y', got {text[:40]!r}")
    return (int(parts[0]), int(parts[1]))


def _xys(value: Any, where: str) -> Tuple[XY, ...]:
    return tuple(_parse_xy(v, f"{where}[{i}]") for i, v in enumerate(_list(value, where)))


def _ints(value: Any, where: str) -> Tuple[int, ...]:
    return tuple(_int(v, f"{where}[{i}]") for i, v in enumerate(_list(value, where)))


def device_from_dict(data: Any, where: str = "device_desc.yaml") -> DeviceDescriptor:
    """A :class:`DeviceDescriptor` from the mapping :func:`device_desc_dict` gives; ConfigError for a
    missing or unknown key, a wrong type, an unknown arch or fields that disagree."""
    top = _map(data, where, _TOP_KEYS)
    arch_name = _str(top["arch_name"], f"{where}: arch_name")
    arch = next((a for a, n in _ARCH_NAMES.items() if n == arch_name.upper()), None)
    if arch is None:
        raise _fail(f"{where}: arch_name", f"unknown arch {arch_name[:40]!r}; expected one of "
                                           f"{sorted(_ARCH_NAMES.values())}")
    grid = _map(top["grid"], f"{where}: grid", ("x_size", "y_size"))
    noc_grid = (_int(grid["x_size"], f"{where}: grid.x_size"), _int(grid["y_size"], f"{where}: grid.y_size"))
    extra_keys = list(_EXTRA_FIELDS) + list(_EXTRA_LISTS)
    extra = _map(top["pybuda"], f"{where}: pybuda", extra_keys, optional=("dram_channel_sizes",))
    values: Dict[str, Any] = {}
    for key, kind in _EXTRA_FIELDS.items():
        conv = {int: _int, float: _float, str: _str}[kind]
        values[key] = conv(extra[key], f"{where}: pybuda.{key}")
    for key in ("worker_noc_xs", "worker_noc_ys", "harvested_noc_rows", "harvested_noc_cols"):
        values[key] = _ints(extra[key], f"{where}: pybuda.{key}")
    dims = []
    for i, d in enumerate(_list(extra["supported_tile_dims"], f"{where}: pybuda.supported_tile_dims")):
        pair = _ints(d, f"{where}: pybuda.supported_tile_dims[{i}]")
        if len(pair) != 2:
            raise _fail(f"{where}: pybuda.supported_tile_dims[{i}]", "expected [rows, cols]")
        dims.append(pair)
    tflops = []
    for i, item in enumerate(_list(extra["published_tflops"], f"{where}: pybuda.published_tflops")):
        item = _list(item, f"{where}: pybuda.published_tflops[{i}]")
        if len(item) != 2:
            raise _fail(f"{where}: pybuda.published_tflops[{i}]", "expected [format, tflops]")
        tflops.append((_str(item[0], f"{where}: published_tflops[{i}][0]"),
                       _float(item[1], f"{where}: published_tflops[{i}][1]")))
    dram_eps = [_xys(ch, f"{where}: dram[{i}]") for i, ch in enumerate(_list(top["dram"], f"{where}: dram"))]
    bank = _int(top["dram_bank_size"], f"{where}: dram_bank_size")
    sizes = [bank] * len(dram_eps)
    if "dram_channel_sizes" in extra:
        sizes = list(_ints(extra["dram_channel_sizes"], f"{where}: pybuda.dram_channel_sizes"))
        if len(sizes) != len(dram_eps):
            raise _fail(f"{where}: pybuda.dram_channel_sizes", "one size per DRAM channel expected")
    desc = DeviceDescriptor(
        name=values["name"], arch=arch, chip_count=values["chip_count"], aiclk_hz=values["aiclk_hz"],
        noc_grid=noc_grid, worker_noc_xs=values["worker_noc_xs"], worker_noc_ys=values["worker_noc_ys"],
        harvesting_mask=values["harvesting_mask"], harvested_noc_rows=values["harvested_noc_rows"],
        harvested_noc_cols=values["harvested_noc_cols"],
        dram_channels=tuple(DramChannel(i, eps, sizes[i]) for i, eps in enumerate(dram_eps)),
        eth_cores=_xys(top["eth"], f"{where}: eth"), pcie_cores=_xys(top["pcie"], f"{where}: pcie"),
        arc_cores=_xys(top["arc"], f"{where}: arc"),
        l1_size_bytes=_int(top["worker_l1_size"], f"{where}: worker_l1_size"),
        l1_data_buffer_base_bytes=values["l1_data_buffer_base_bytes"],
        l1_pipegen_reserved_bytes=values["l1_pipegen_reserved_bytes"],
        l1_dram_io_reserved_bytes=values["l1_dram_io_reserved_bytes"],
        eth_l1_size_bytes=_int(top["eth_l1_size"], f"{where}: eth_l1_size"),
        dest_tiles_16bit=values["dest_tiles_16bit"], dram_blocks_per_channel=values["dram_blocks_per_channel"],
        dram_bw_per_block_theoretical_gib_s=values["dram_bw_per_block_theoretical_gib_s"],
        dram_bw_per_block_measured_gib_s=values["dram_bw_per_block_measured_gib_s"],
        noc_bytes_per_cycle=values["noc_bytes_per_cycle"], pcie_bytes_per_s=values["pcie_bytes_per_s"],
        pcie_bytes_per_cycle_observed=values["pcie_bytes_per_cycle_observed"],
        eth_link_gib_per_s=values["eth_link_gib_per_s"], eth_derate=values["eth_derate"],
        host_memory_channels=values["host_memory_channels"], fpu_flops_per_cycle=values["fpu_flops_per_cycle"],
        supported_tile_dims=tuple(dims), max_dram_in_queues=values["max_dram_in_queues"],
        max_dram_out_queues=values["max_dram_out_queues"], published_tflops=tuple(tflops))
    _check_consistent(desc, top, where)
    return desc


def _check_consistent(desc: DeviceDescriptor, top: Mapping[str, Any], where: str) -> None:
    """The cross-field rules a descriptor must keep; each failure names the field."""
    gx, gy = desc.noc_grid
    if gx < 1 or gy < 1:
        raise _fail(f"{where}: grid", "grid sizes must be positive")

    def inside(xy: XY, key: str) -> None:
        if not (0 <= xy[0] < gx and 0 <= xy[1] < gy):
            raise _fail(f"{where}: {key}", f"NoC coordinate {_xy_text(xy)} lies outside the {gx}x{gy} grid")
    if not desc.worker_noc_xs or not desc.worker_noc_ys:
        raise _fail(f"{where}: functional_workers", "a device needs at least one worker row and column")
    if len(set(desc.worker_noc_xs)) != len(desc.worker_noc_xs) or \
            len(set(desc.worker_noc_ys)) != len(desc.worker_noc_ys):
        raise _fail(f"{where}: pybuda.worker_noc_xs/ys", "repeated worker column or row")
    workers = {(x, y) for y in desc.worker_noc_ys for x in desc.worker_noc_xs}
    for xy in workers:
        inside(xy, "functional_workers")
    listed = set(_xys(top["functional_workers"], f"{where}: functional_workers"))
    if listed != workers:
        raise _fail(f"{where}: functional_workers", "does not match pybuda.worker_noc_xs × worker_noc_ys")
    try:
        rows = harvested_noc_rows(desc.arch, desc.harvesting_mask)
        cols = harvested_noc_cols(desc.arch, desc.harvesting_mask)
    except ConfigError as exc:
        raise _fail(f"{where}: pybuda.harvesting_mask", str(exc)) from None
    if rows != desc.harvested_noc_rows or cols != desc.harvested_noc_cols:
        raise _fail(f"{where}: pybuda.harvesting_mask",
                    f"mask 0x{desc.harvesting_mask:x} harvests NoC rows {list(rows)} / columns {list(cols)}, "
                    f"but the file lists rows {list(desc.harvested_noc_rows)} / columns "
                    f"{list(desc.harvested_noc_cols)}")
    if set(rows) & set(desc.worker_noc_ys) or set(cols) & set(desc.worker_noc_xs):
        raise _fail(f"{where}: pybuda.worker_noc_ys", "a harvested row/column still holds workers")
    harvested = set(_xys(top["harvested_workers"], f"{where}: harvested_workers"))
    expect = {(x, y) for y in rows for x in desc.worker_noc_xs} | {(x, y) for x in cols for y in desc.worker_noc_ys}
    if harvested != expect:
        raise _fail(f"{where}: harvested_workers", "does not match the harvesting mask")
    for key, cores in (("arc", desc.arc_cores), ("pcie", desc.pcie_cores), ("eth", desc.eth_cores)):
        for xy in cores:
            inside(xy, key)
            if xy in workers:
                raise _fail(f"{where}: {key}", f"{_xy_text(xy)} is also a worker core")
    if not desc.dram_channels:
        raise _fail(f"{where}: dram", "a device needs at least one DRAM channel")
    for ch in desc.dram_channels:
        if not ch.noc_endpoints:
            raise _fail(f"{where}: dram[{ch.index}]", "a DRAM channel needs a NoC endpoint")
        for xy in ch.noc_endpoints:
            inside(xy, f"dram[{ch.index}]")
            if xy in workers:
                raise _fail(f"{where}: dram[{ch.index}]", f"{_xy_text(xy)} is also a worker core")
        if ch.size_bytes <= 0:
            raise _fail(f"{where}: dram_bank_size", "must be positive")
    if desc.chip_count < 1:
        raise _fail(f"{where}: pybuda.chip_count", "must be >= 1")
    if desc.chip_count > 1 and desc.arch.value != "grayskull" and not desc.eth_cores:
        # Chips without Ethernet (Grayskull) are separate cards linked over PCIe through the host; chips that
        # link over Ethernet need Ethernet cores to do it.
        raise _fail(f"{where}: pybuda.chip_count", f"{desc.arch.value} chips link over Ethernet, but the "
                    f"descriptor lists no Ethernet cores")
    if desc.aiclk_hz <= 0:
        raise _fail(f"{where}: pybuda.aiclk_hz", "must be positive")
    if desc.l1_size_bytes <= desc.l1_data_buffer_base_bytes + desc.l1_pipegen_reserved_bytes:
        raise _fail(f"{where}: worker_l1_size", "leaves no L1 for op buffers after firmware and pipegen")


def read_device_descriptor(path_or_text: Union[str, "os.PathLike[str]"]) -> DeviceDescriptor:
    """Read a ``device_desc.yaml`` (a path, or the YAML text itself when it contains a newline or a
    ``:``) back into a :class:`DeviceDescriptor`. ConfigError for a missing file, malformed YAML, an
    unknown arch or inconsistent fields. Only ``yaml.safe_load`` is used: no tags construct objects."""
    text = os.fspath(path_or_text)
    where = "device_desc.yaml"
    if "\n" not in text and ":" not in text.replace(os.sep, "/").split("/")[-1]:
        where = text
        try:
            with open(text, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            raise ConfigError(f"device descriptor file not found: {where}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"device descriptor {where} cannot be read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"device descriptor {where} is not valid YAML: {str(exc)[:200]}") from None
    return device_from_dict(data, where)


# --------------------------------------------------------------------------------------------------
# Cluster
# --------------------------------------------------------------------------------------------------

def read_cluster_descriptor(path: str) -> Dict[str, Any]:
    """The ``cluster_desc.yaml`` at ``path`` (``backend_cluster_descriptor_path``, as :func:`cluster_desc_yaml`
    writes it) as a mapping with at least ``chips`` {id: [x, y, rack, shelf]}; ConfigError when the file is
    missing or is not a cluster descriptor."""
    where = f"backend_cluster_descriptor_path '{path}'"
    if not os.path.isfile(path):
        raise ConfigError(f"{where}: no such file")
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{where}: not readable YAML: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("chips"), dict) or not data["chips"]:
        raise ConfigError(f"{where}: not a cluster descriptor (expected a 'chips' mapping of chip id to location)")
    return data


def _chip_layout(desc: DeviceDescriptor) -> List[Tuple[int, int]]:
    """(x, y) of every chip: a row of chips, or Galaxy's 4x8 mesh (rows of 8)."""
    n = desc.chip_count
    if n == GALAXY_SHAPE[0] * GALAXY_SHAPE[1]:
        return [(i % GALAXY_SHAPE[1], i // GALAXY_SHAPE[1]) for i in range(n)]
    return [(i, 0) for i in range(n)]


def cluster_desc_dict(desc: DeviceDescriptor, links_per_pair: int = 0) -> Dict[str, Any]:
    """The cluster of ``desc`` as a mapping (see :func:`cluster_desc_yaml`)."""
    layout = _chip_layout(desc)
    neighbours = []
    for a, (xa, ya) in enumerate(layout):
        for b, (xb, yb) in enumerate(layout):
            if a < b and abs(xa - xb) + abs(ya - yb) == 1:
                neighbours.append((a, b))
    eth = len(desc.eth_cores)
    # Galaxy: 4 links between neighbours (spec §5.1); a two-chip card (n300) pairs up its Ethernet
    # cores two per pair [D: the real n300 uses 2 of its 16 cores for the chip-to-chip link].
    links = links_per_pair or (4 if len(layout) == GALAXY_SHAPE[0] * GALAXY_SHAPE[1] else 2)
    used = [0] * len(layout)
    connections = []
    for a, b in neighbours:
        for _ in range(links):
            if used[a] >= eth or used[b] >= eth:
                break
            connections.append([{"chip": a, "chan": used[a]}, {"chip": b, "chan": used[b]}])
            used[a] += 1
            used[b] += 1
    return {
        "arch": {i: desc.arch.value for i in range(len(layout))},
        "chips": {i: [x, y, 0, 0] for i, (x, y) in enumerate(layout)},
        "ethernet_connections": connections,
        # the host reaches chip 0 over PCIe; the others only through Ethernet (n300, Galaxy via its gateway)
        "chips_with_mmio": [{0: 0}],
        "harvesting": {i: {"noc_translation": desc.arch == BackendDevice.Wormhole_B0 and desc.harvesting_mask != 0,
                           "harvest_mask": desc.harvesting_mask} for i in range(len(layout))},
    }


def cluster_desc_yaml(desc: DeviceDescriptor) -> str:
    """``cluster_desc.yaml`` of ``desc``: ``chips`` {id: [x, y, rack, shelf]}, ``ethernet_connections``
    [[{chip, chan}, {chip, chan}], …] between neighbouring chips of a multi-chip preset,
    ``chips_with_mmio`` (spec §5.1 "Multichip")."""
    return yaml.safe_dump(cluster_desc_dict(desc), sort_keys=False, default_flow_style=None, width=120)
