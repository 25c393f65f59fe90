"""File names built from user-given names (module, graph and model names), kept inside their folder.

Every writer that turns a user-given name into a file name goes through :func:`safe_file_name` and
:func:`path_inside`: a name such as ``../../etc/x`` or ``/tmp/x`` becomes one harmless path component,
and the final path is checked to lie inside the folder it is meant for (the build folder).
"""

from __future__ import annotations

import os
import re
from typing import Union

from pybuda.errors import ConfigError

__all__ = ["safe_file_name", "path_inside"]

# Letters, digits, '.', '_', '-' and '+' are kept; everything else (path separators, NUL, spaces,
# control characters, drive colons) becomes '_'.
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")
_MAX_LEN = 200  # leaves room for suffixes under the usual 255-byte file-name limit


def safe_file_name(name: object) -> str:
    """``name`` as a single, harmless file-name component.

    Characters other than letters, digits, ``.``, ``_``, ``-`` and ``+`` become ``_``; leading dots are
    replaced too, so the result is never ``.``, ``..`` or a hidden file; an empty name becomes ``_``.
    Plain names (``my_module``, ``bert.encoder``) are unchanged.
    """
    text = _UNSAFE.sub("_", str(name))
    stripped = text.lstrip(".")
    text = "_" * (len(text) - len(stripped)) + stripped
    return text[:_MAX_LEN] or "_"


def path_inside(root: Union[str, "os.PathLike[str]"], *parts: str) -> str:
    """``root`` joined with ``parts`` (each already a file name or a fixed sub-folder), checked to lie
    inside ``root`` once symlinks and ``..`` are resolved; raises :class:`~pybuda.errors.ConfigError`
    otherwise (a name that slipped past :func:`safe_file_name`, or a symlink planted in the folder)."""
    root_str = os.fspath(root)
    path = os.path.join(root_str, *parts)
    real_root = os.path.realpath(root_str)
    real_path = os.path.realpath(path)
    if os.path.commonpath([real_root, real_path]) != real_root or real_path == real_root:
        raise ConfigError(f"refusing to write {path!r}: it lies outside the build folder {root_str!r}")
    return path
