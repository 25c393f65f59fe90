"""The device-image file: a plain tar of data files with a manifest, written and read without trusting it.

Layout (seed 002 / TT-Buda's ``unzipped_tti/`` where it carries data)::

    manifest.json                       format name, image version, every other file's size and SHA-256
    device.json                         the image's fields and, per compiled module, its host-I/O record
    compile_and_runtime_config.json     the compiler config and the runtime environment of the compile
    <module>_netlist.yaml               one netlist per compiled module
    tensors/<name>.safetensors          parameter/constant values, CPU-stage tensors
    cpu_stages/<name>.json              CPU-fallback stages as data (pybuda.frontend.fx_serde)
    cpu_stages/<name>.onnx              CPU-fallback stages of ONNX models: the ONNX subgraph (protobuf data,
                                        parsed and checked by the onnx package, run by ONNX Runtime)
    backend_build_binaries/...          device/cluster descriptors, per-epoch pipes, streams and kernels

Reading (:func:`read_archive`) happens in memory — nothing is extracted to disk — and refuses, with
:class:`~pybuda.errors.ImageError`: a file that is not a complete tar; a member that is not a regular
file or folder (symlinks, hard links, devices); a member path that is absolute or climbs out with ``..``;
an archive larger than the stated limit (checked on the file size and on the member headers, before any
member is read); a file the manifest does not list, a listed file that is missing, or one whose size or
hash differs; any file other than JSON, YAML, safetensors or ONNX, and any content that is a pickle or a zip
(``torch.save``). Nothing read here is ever imported, unpickled or executed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import tarfile
from typing import Dict, Mapping, Union

from pybuda.errors import ImageError

__all__ = ["IMAGE_FORMAT", "MANIFEST", "DEFAULT_MAX_BYTES", "write_archive", "read_archive", "check_member_name"]

#: The ``format`` value every manifest carries.
IMAGE_FORMAT = "pybuda-device-image"
MANIFEST = "manifest.json"
#: Default size limit of an image (the whole file and the sum of its members): 16 GiB holds BERT-Large's
#: float32 parameters several times over; pass ``max_bytes`` to load larger ones.
DEFAULT_MAX_BYTES = 16 * 1024 ** 3
#: At most this many members: a real image has a few per module and per epoch.
MAX_MEMBERS = 100_000
#: File kinds an image may hold; everything else (``.pkl``, ``.py``, ``.so`` ...) is refused. ``.onnx`` is a
#: protobuf message (an ONNX CPU stage): data that the onnx parser and checker read, never code.
ALLOWED_SUFFIXES = (".json", ".yaml", ".safetensors", ".onnx")

_PICKLE_PROTOCOLS = {bytes([0x80, p]) for p in range(2, 6)}


def check_member_name(name: str) -> str:
    """``name`` as a normalised relative POSIX path inside the image, or ImageError when it could leave
    the target folder (absolute, ``..``, a drive or backslash path) or is otherwise not a plain path."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ImageError(f"image member {name!r}: not a valid path")
    if name.startswith(("/", "\\")) or "\\" in name or (len(name) > 1 and name[1] == ":"):
        raise ImageError(f"image member {name!r}: absolute or non-POSIX path; members must stay inside the image")
    parts = name.split("/")
    if any(p == ".." for p in parts):
        raise ImageError(f"image member {name!r}: path climbs out of the image folder with '..'")
    norm = posixpath.normpath(name)
    if norm in (".", "") or norm.startswith("../"):
        raise ImageError(f"image member {name!r}: not a path inside the image")
    return norm


def _check_content(name: str, data: bytes) -> None:
    """Refuse code and pickles, whatever the file is called."""
    if not name.endswith(ALLOWED_SUFFIXES):
        kind = "Python code" if name.endswith((".py", ".pyc")) else \
            "a pickle" if name.endswith((".pkl", ".pickle", ".pt", ".pth", ".bin")) else "a file of unknown kind"
        raise ImageError(f"image member '{name}' is {kind}; images hold only {', '.join(ALLOWED_SUFFIXES)} files "
                         f"and loading never runs code from them")
    # Protocol 2+ pickles start with PROTO; older ones cannot pass the JSON, YAML or safetensors parsers
    # that read every member, so they are refused there.
    if data[:2] in _PICKLE_PROTOCOLS:
        raise ImageError(f"image member '{name}' holds a pickle; images never hold pickles")
    if data[:4] == b"PK\x03\x04":
        raise ImageError(f"image member '{name}' is a zip archive (a torch.save file?); images never hold them")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_archive(path: Union[str, "os.PathLike[str]"], files: Mapping[str, bytes], image_version: str) -> int:
    """Write ``files`` (relative POSIX path -> bytes) and their manifest as a tar at ``path``; returns its size.

    The tar is deterministic (sorted members, zero mtimes and owners), so an image of the same compile has
    the same bytes. It is written next to ``path`` and renamed into place: a failed save leaves no half file.
    """
    names = sorted(files)
    for name in names:
        if check_member_name(name) != name or name == MANIFEST:
            raise ImageError(f"cannot store image member {name!r}")
        _check_content(name, files[name])
    manifest = {"format": IMAGE_FORMAT, "image_version": image_version,
                "files": {n: {"size": len(files[n]), "sha256": _sha256(files[n])} for n in names}}
    members = [(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())] + [(n, files[n]) for n in names]
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = path + ".partial"
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return os.path.getsize(path)


def read_archive(path: Union[str, "os.PathLike[str]"], max_bytes: int = DEFAULT_MAX_BYTES) -> Dict[str, bytes]:
    """The files of the image at ``path`` (without the manifest), after every check in the module docstring.

    Returns ``{relative path: bytes}``; also returns the manifest under :data:`MANIFEST`, parsed by the caller.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ImageError(f"no device image at '{path}'")
    size = os.path.getsize(path)
    if size > max_bytes:
        raise ImageError(f"device image '{path}' is {size:,} bytes, over the limit of {max_bytes:,} "
                         f"(pass a larger max_bytes to load it)")
    try:
        tar = tarfile.open(path, "r:")  # plain tar only: a compressed stream could hide its real size
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ImageError(f"'{path}' is not a device image (not a complete, uncompressed tar archive: {e})") from None
    files: Dict[str, bytes] = {}
    with tar:
        try:
            members = tar.getmembers()
        except (tarfile.TarError, EOFError, OSError) as e:
            raise ImageError(f"device image '{path}' is truncated or corrupt: {e}") from None
        if len(members) > MAX_MEMBERS:
            raise ImageError(f"device image '{path}' has {len(members):,} members, over the limit of {MAX_MEMBERS:,}")
        total = 0
        for m in members:
            name = check_member_name(m.name)
            if m.isdir():
                continue
            if not m.isfile():
                kind = "a symbolic link" if m.issym() else "a hard link" if m.islnk() else "not a regular file"
                raise ImageError(f"image member '{m.name}' is {kind}; images hold only regular files")
            if name in files:
                raise ImageError(f"image member '{name}' appears twice")
            total += m.size
            if total > max_bytes:
                raise ImageError(f"device image '{path}' unpacks to over {max_bytes:,} bytes (the limit)")
            files[name] = b""  # placeholder: sizes are all checked before anything is read
        for m in members:
            if m.isdir():
                continue
            name = posixpath.normpath(m.name)
            try:
                handle = tar.extractfile(m)
                data = handle.read() if handle is not None else b""
            except (tarfile.TarError, EOFError, OSError) as e:
                raise ImageError(f"device image '{path}' is truncated: member '{name}' cannot be read ({e})") from None
            if len(data) != m.size:
                raise ImageError(f"device image '{path}' is truncated: member '{name}' has {len(data):,} of "
                                 f"{m.size:,} bytes")
            files[name] = data
    _check_manifest(path, files)
    return files


def _check_manifest(path: str, files: Dict[str, bytes]) -> None:
    raw = files.get(MANIFEST)
    if raw is None:
        raise ImageError(f"device image '{path}' has no {MANIFEST}; it was not written by pybuda or was altered")
    try:
        manifest = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ImageError(f"device image '{path}': {MANIFEST} is not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != IMAGE_FORMAT or \
            not isinstance(manifest.get("files"), dict):
        raise ImageError(f"device image '{path}': {MANIFEST} is not a pybuda image manifest")
    listed = manifest["files"]
    present = set(files) - {MANIFEST}
    missing = sorted(set(listed) - present)
    extra = sorted(present - set(listed))
    if missing:
        raise ImageError(f"device image '{path}' lacks file(s) its manifest lists: {missing}")
    if extra:
        raise ImageError(f"device image '{path}' holds file(s) its manifest does not list: {extra}")
    for name in sorted(present):
        entry = listed[name]
        data = files[name]
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise ImageError(f"device image '{path}': manifest entry for '{name}' is malformed")
        if entry.get("size") != len(data) or entry["sha256"] != _sha256(data):
            raise ImageError(f"device image '{path}': '{name}' does not match its SHA-256 in the manifest "
                             f"(the file was altered after the image was written)")
        _check_content(name, data)
