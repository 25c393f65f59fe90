"""The backend build of a netlist on a device: :class:`BackendBuild`, its files (TT-Buda's backend output
directory layout) and their strict reader.

``files()`` gives ``device_desc.yaml``, ``cluster_desc.yaml`` and, per temporal epoch ``n``,
``temporal_epoch_<n>/pipes.json``, ``streams.json`` and ``kernels.json`` (JSON: the per-epoch records are
large). :meth:`BackendBuild.from_files` reads them back with ``json.loads`` and a safe YAML loader only
(plain data, no object tags), rejecting YAML aliases, NaN/Infinity, unknown or missing files and keys,
wrong types and inconsistent records with :class:`~pybuda.errors.ImageError` naming the file and key:
the files come from device images, which may be hostile.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import yaml

from pybuda.arch import DeviceDescriptor, get_device_descriptor
from pybuda.backend_build.descriptors import (
    cluster_desc_dict, cluster_desc_yaml, device_desc_yaml, read_device_descriptor,
)
from pybuda.backend_build.kernels import KernelConfig, graph_kernels
from pybuda.backend_build.routing import PIPE_KINDS, STREAM_RANGES, CoreStreams, Pipe, core_streams, epoch_pipes
from pybuda.errors import ConfigError, ImageError
from pybuda.netlist.model import Execute, Netlist
from pybuda.perf.program import _Exec, _flatten, _group_temporal

__all__ = ["EpochBuild", "BackendBuild", "build", "DEVICE_DESC", "CLUSTER_DESC", "EPOCH_FILES"]

DEVICE_DESC = "device_desc.yaml"
CLUSTER_DESC = "cluster_desc.yaml"
#: The files of each ``temporal_epoch_<n>/`` folder.
EPOCH_FILES = ("pipes.json", "streams.json", "kernels.json")
_EPOCH_DIR = re.compile(r"^temporal_epoch_(0|[1-9][0-9]{0,8})$")
#: Upper bound on one file's size: a build of the largest grid stays far below it; a bigger file is
#: refused before parsing.
MAX_FILE_BYTES = 256 * 1024 * 1024
#: The safe loader, libyaml's when present (same SafeConstructor as ``yaml.safe_load``: plain
#: scalars, lists and mappings only, never objects — just ~10x faster on a large build).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class EpochBuild:
    """One temporal epoch: its graphs (run concurrently, one per chip), pipes, core streams and kernels."""

    index: int
    graphs: Tuple[str, ...]
    pipes: Tuple[Pipe, ...]
    streams: Tuple[CoreStreams, ...]
    kernels: Tuple[KernelConfig, ...]


@dataclass(frozen=True)
class BackendBuild:
    """Everything the backend computed before running a netlist, as data."""

    device: DeviceDescriptor
    cluster: Dict[str, Any]
    epochs: Tuple[EpochBuild, ...]

    @classmethod
    def build(cls, netlist: Netlist, device: Union[DeviceDescriptor, str],
              temporal_epochs: Optional[Mapping[str, int]] = None) -> "BackendBuild":
        """The backend build of ``netlist`` on ``device`` (see the module-level :func:`build`)."""
        return build(netlist, device, temporal_epochs)

    def epoch(self, index: int) -> EpochBuild:
        """The temporal epoch ``index`` (KeyError if none)."""
        for e in self.epochs:
            if e.index == index:
                return e
        raise KeyError(index)

    def files(self) -> Dict[str, str]:
        """Relative POSIX path → YAML text, mirroring TT-Buda's backend output directory."""
        out = {DEVICE_DESC: device_desc_yaml(self.device), CLUSTER_DESC: cluster_desc_yaml(self.device)}
        for e in self.epochs:
            head = {"temporal_epoch": e.index, "graphs": list(e.graphs)}
            folder = f"temporal_epoch_{e.index}"
            out[f"{folder}/pipes.json"] = _dump_json({**head, "pipes": [_encode(p) for p in e.pipes]})
            out[f"{folder}/streams.json"] = _dump_json({**head, "cores": [_encode(s) for s in e.streams]})
            out[f"{folder}/kernels.json"] = _dump_json({**head, "ops": [_encode(k) for k in e.kernels]})
        return out

    @classmethod
    def from_files(cls, files: Mapping[str, Union[str, bytes]]) -> "BackendBuild":
        """Parse and validate the files :meth:`files` wrote; ImageError naming the file and key for a
        missing or unknown file, malformed YAML, an unknown or missing key, a wrong type or a record
        that contradicts itself."""
        if not isinstance(files, Mapping):
            raise ImageError("backend build: expected a mapping of file names to text")
        epochs: Dict[int, Dict[str, Any]] = {}
        for name in files:
            if not isinstance(name, str):
                raise ImageError("backend build: file names must be strings")
            if name in (DEVICE_DESC, CLUSTER_DESC):
                continue
            parts = name.split("/")
            m = _EPOCH_DIR.match(parts[0]) if len(parts) == 2 else None
            if m is None or parts[1] not in EPOCH_FILES:
                raise ImageError(f"backend build: unknown file {name[:120]!r}")
            epochs.setdefault(int(m.group(1)), {})
        for needed in (DEVICE_DESC, CLUSTER_DESC):
            if needed not in files:
                raise ImageError(f"backend build: missing file {needed}")
        text = _text(files, DEVICE_DESC)
        _no_aliases(DEVICE_DESC, text)
        try:
            device = read_device_descriptor(text)
        except ConfigError as exc:
            raise ImageError(f"{DEVICE_DESC}: {exc}") from None
        cluster = _load(CLUSTER_DESC, _text(files, CLUSTER_DESC))
        if cluster != cluster_desc_dict(device):
            raise ImageError(f"{CLUSTER_DESC}: does not describe the cluster of the device in {DEVICE_DESC}")
        built: List[EpochBuild] = []
        for index in sorted(epochs):
            folder = f"temporal_epoch_{index}"
            docs = {}
            for fname, key in zip(EPOCH_FILES, ("pipes", "cores", "ops")):
                path = f"{folder}/{fname}"
                if path not in files:
                    raise ImageError(f"backend build: missing file {path}")
                doc = _load(path, _text(files, path))
                _keys(doc, path, ("temporal_epoch", "graphs", key))
                if _decode(int, doc["temporal_epoch"], path, "temporal_epoch") != index:
                    raise ImageError(f"{path}: temporal_epoch: {doc['temporal_epoch']!r} does not match its folder")
                docs[fname] = doc
            graphs = _decode(Tuple[str, ...], docs["pipes.json"]["graphs"], f"{folder}/pipes.json", "graphs")
            for fname in EPOCH_FILES[1:]:
                if _decode(Tuple[str, ...], docs[fname]["graphs"], f"{folder}/{fname}", "graphs") != graphs:
                    raise ImageError(f"{folder}/{fname}: graphs: differ from {folder}/pipes.json")
            pipes = _decode(Tuple[Pipe, ...], docs["pipes.json"]["pipes"], f"{folder}/pipes.json", "pipes")
            streams = _decode(Tuple[CoreStreams, ...], docs["streams.json"]["cores"], f"{folder}/streams.json",
                              "cores")
            kernels = _decode(Tuple[KernelConfig, ...], docs["kernels.json"]["ops"], f"{folder}/kernels.json",
                              "ops")
            _check_pipes(f"{folder}/pipes.json", pipes)
            _check_streams(f"{folder}/streams.json", streams)
            built.append(EpochBuild(index, graphs, pipes, streams, kernels))
        return cls(device=device, cluster=cluster, epochs=tuple(built))


# --------------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------------

def _epoch_groups(netlist: Netlist, temporal_epochs: Optional[Mapping[str, int]]) -> List[Tuple[int, List[str]]]:
    """Graphs per temporal epoch, by the performance model's rule (:func:`pybuda.perf.program._group_temporal`):
    every graph once, in the order the programs first execute it (graphs no program runs last);
    consecutive graphs on different chips share an epoch unless ``temporal_epochs`` says otherwise."""
    order: List[str] = []
    for prog in netlist.programs:
        for ex in _flatten(netlist, prog):
            if ex.graph.name not in order:
                order.append(ex.graph.name)
    order += [g for g in netlist.graphs if g not in order]
    execs = [_Exec(netlist.graphs[g], Execute(graph_name=g)) for g in order]
    groups = _group_temporal(execs, temporal_epochs)
    if not temporal_epochs:
        return [(i, [ex.graph.name for ex in group]) for i, group in enumerate(groups)]
    out: List[Tuple[int, List[str]]] = []
    seen: Dict[int, List[str]] = {}
    for group in groups:
        names = [ex.graph.name for ex in group]
        index = temporal_epochs.get(names[0])
        if index is None or isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ConfigError(f"temporal_epochs gives graph {names[0]!r} no epoch index (a non-negative int)")
        if index in seen:
            raise ConfigError(f"temporal epoch {index} holds graphs {seen[index] + names}, two on one chip or not "
                              f"consecutive in the program")
        seen[index] = names
        out.append((index, names))
    return sorted(out)


def build(netlist: Netlist, device: Union[DeviceDescriptor, str],
          temporal_epochs: Optional[Mapping[str, int]] = None) -> BackendBuild:
    """The backend build of ``netlist`` on ``device`` (a descriptor or a preset name such as
    ``wh_n150``): descriptors, and per temporal epoch the pipes (with routes), the per-core streams and
    the kernel configurations. NetlistError for an op the device cannot hold (unplaced, off the grid,
    more than 8 inputs); ConfigError for a bad ``temporal_epochs`` or an unknown preset."""
    if isinstance(device, str):
        device = get_device_descriptor(device_config=device)
    epochs = []
    for index, graphs in _epoch_groups(netlist, temporal_epochs):
        pipes: List[Pipe] = []
        streams: List[CoreStreams] = []
        kernels: List[KernelConfig] = []
        for g in graphs:
            gp = epoch_pipes(netlist, g, device)
            pipes += gp
            streams += core_streams(netlist, g, device, gp)
            kernels += graph_kernels(netlist, g)
        epochs.append(EpochBuild(index, tuple(graphs), tuple(pipes), tuple(streams), tuple(kernels)))
    return BackendBuild(device=device, cluster=cluster_desc_dict(device), epochs=tuple(epochs))


# --------------------------------------------------------------------------------------------------
# Plain data <-> records (driven by the dataclasses' type hints)
# --------------------------------------------------------------------------------------------------

def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


_HINTS: Dict[type, Dict[str, Any]] = {}


def _hints(cls: type) -> Dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _bad(path: str, key: str, message: str) -> ImageError:
    return ImageError(f"{path}: {key}: {message}")


def _keys(doc: Any, path: str, keys: Tuple[str, ...], key: str = "") -> None:
    if not isinstance(doc, dict):
        raise _bad(path, key or "(top)", f"expected a mapping, got {type(doc).__name__}")
    unknown = sorted(str(k)[:60] for k in doc if k not in keys)
    if unknown:
        raise _bad(path, key or "(top)", f"unknown key(s) {unknown}")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise _bad(path, key or "(top)", f"missing key(s) {missing}")


def _plain_data(value: Any, path: str, key: str) -> Any:
    """Check that an attribute value is plain YAML data (what safe_load yields) with string keys."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise _bad(path, key, "mapping keys must be strings")
            _plain_data(v, path, f"{key}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _plain_data(v, path, f"{key}[{i}]")
    elif not (value is None or isinstance(value, (bool, int, float, str))):
        raise _bad(path, key, f"unexpected {type(value).__name__}")
    return value


def _decode(tp: Any, value: Any, path: str, key: str) -> Any:
    """``value`` (from safe_load) as type ``tp``; ImageError naming ``path`` and ``key`` otherwise."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        fields = [f.name for f in dataclasses.fields(tp)]
        _keys(value, path, tuple(fields), key)
        hints = _hints(tp)
        return tp(**{name: _decode(hints[name], value[name], path, f"{key}.{name}") for name in fields})
    if origin is Union:
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _decode(inner[0], value, path, key)
    if origin is tuple:
        if not isinstance(value, list):
            raise _bad(path, key, f"expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v, path, f"{key}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise _bad(path, key, f"expected {len(args)} items, got {len(value)}")
        return tuple(_decode(a, v, path, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise _bad(path, key, f"expected a mapping, got {type(value).__name__}")
        return _plain_data(value, path, key)
    if tp is Any:
        return _plain_data(value, path, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise _bad(path, key, f"expected true/false, got {type(value).__name__}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(path, key, f"expected an integer, got {type(value).__name__}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(path, key, f"expected a number, got {type(value).__name__}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _bad(path, key, f"expected a string, got {type(value).__name__}")
        return value
    raise _bad(path, key, f"no reader for {tp!r}")  # a record type this module does not know


def _text(files: Mapping[str, Union[str, bytes]], name: str) -> str:
    data = files[name]
    if isinstance(data, bytes):
        if len(data) > MAX_FILE_BYTES:
            raise ImageError(f"{name}: larger than {MAX_FILE_BYTES} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ImageError(f"{name}: not UTF-8 text") from None
    if not isinstance(data, str):
        raise ImageError(f"{name}: expected text, got {type(data).__name__}")
    if len(data) > MAX_FILE_BYTES:
        raise ImageError(f"{name}: larger than {MAX_FILE_BYTES} characters")
    return data


def _no_aliases(name: str, text: str) -> None:
    """Refuse YAML anchors/aliases: the writer never emits them, and nested aliases expand into
    exponentially large documents for any walker."""
    try:
        for event in yaml.parse(text, Loader=_SAFE_LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise ImageError(f"{name}: YAML aliases are not allowed")
    except yaml.YAMLError as exc:
        raise ImageError(f"{name}: not valid YAML: {str(exc)[:200]}") from None


def _dump_json(doc: Any) -> str:
    # The per-epoch records are large (BERT: ~200 KB of pipes per epoch): JSON writes and reads them an order
    # of magnitude faster than YAML, and is as strict.
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _load(name: str, text: str) -> Any:
    if name.endswith(".json"):
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:
            raise ImageError(f"{name}: not valid JSON: {str(exc)[:200]}") from None
    _no_aliases(name, text)
    try:
        return yaml.safe_load(text)  # only the small descriptors are YAML; the large records are JSON
    except yaml.YAMLError as exc:
        raise ImageError(f"{name}: not valid YAML: {str(exc)[:200]}") from None


def _check_pipes(path: str, pipes: Tuple[Pipe, ...]) -> None:
    ids = set()
    for k, p in enumerate(pipes):
        key = f"pipes[{k}]"
        if p.id in ids:
            raise _bad(path, f"{key}.id", f"repeated pipe id {p.id[:80]!r}")
        ids.add(p.id)
        if p.kind not in PIPE_KINDS:
            raise _bad(path, f"{key}.kind", f"unknown kind {p.kind[:40]!r}; expected one of {list(PIPE_KINDS)}")
        if not p.sources or not p.destinations:
            raise _bad(path, key, "a pipe needs at least one source and one destination")
        if p.gather != (len(p.sources) > 1):
            raise _bad(path, f"{key}.gather", "disagrees with the number of sources")
        if p.multicast != (len(p.destinations) > 1 and p.operand >= 0):
            raise _bad(path, f"{key}.multicast", "disagrees with the destinations")
        if p.tiles_per_input < 0 or p.bytes_per_input < 0:
            raise _bad(path, f"{key}.bytes_per_input", "must not be negative")
        for end in p.sources + p.destinations:
            if end.kind not in ("core", "dram", "host"):
                raise _bad(path, key, f"unknown endpoint kind {end.kind[:40]!r}")


def _check_streams(path: str, cores: Tuple[CoreStreams, ...]) -> None:
    for k, core in enumerate(cores):
        used = set()
        for j, buf in enumerate(core.buffers):
            key = f"cores[{k}].buffers[{j}]"
            rng = STREAM_RANGES.get(buf.role)
            if rng is None:
                raise _bad(path, f"{key}.role", f"unknown role {buf.role[:40]!r}")
            if not rng[0] <= buf.stream_id <= rng[1]:
                raise _bad(path, f"{key}.stream_id", f"{buf.stream_id} outside the {buf.role} range {rng}")
            if buf.stream_id in used:
                raise _bad(path, f"{key}.stream_id", f"stream {buf.stream_id} used twice on one core")
            used.add(buf.stream_id)
            if buf.size_bytes < 0 or buf.tiles < 0:
                raise _bad(path, f"{key}.size_bytes", "must not be negative")

