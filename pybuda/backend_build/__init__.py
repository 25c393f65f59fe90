"""The backend build, as data: what TT-Buda's backend wrote before running a netlist.

For a parsed :class:`~pybuda.netlist.Netlist` and a :class:`~pybuda.arch.DeviceDescriptor`:

* :mod:`~pybuda.backend_build.descriptors`: ``device_desc.yaml`` / ``cluster_desc.yaml`` (spec §5.1),
  and reading a device descriptor back;
* :mod:`~pybuda.backend_build.routing`: per temporal epoch, every pipe (producer cores or DRAM/host
  queue buffers → consumer cores, with its NoC route) and each worker core's streams and buffers
  (spec §5.2/§5.3) — what net2pipe/pipegen computed; the performance model reads its traffic from these;
* :mod:`~pybuda.backend_build.kernels`: each op's kernel configuration (formats, fidelity, blocking);
* :mod:`~pybuda.backend_build.build`: :class:`BackendBuild`, the files of the backend output directory
  and their strict reader (for device images).

``pybuda.backend_build.build`` is the submodule; build with :meth:`BackendBuild.build` or
``pybuda.backend_build.build.build``. Submodules are imported on use (the names below resolve lazily), so the performance model can import
:mod:`~pybuda.backend_build.routing` without loading the rest.
"""

_LAZY = {
    "BackendBuild": "pybuda.backend_build.build", "EpochBuild": "pybuda.backend_build.build",
    "device_desc_yaml": "pybuda.backend_build.descriptors", "read_device_descriptor": "pybuda.backend_build.descriptors",
    "cluster_desc_yaml": "pybuda.backend_build.descriptors",
    "Pipe": "pybuda.backend_build.routing", "CoreStreams": "pybuda.backend_build.routing",
    "epoch_pipes": "pybuda.backend_build.routing", "core_streams": "pybuda.backend_build.routing",
    "KernelConfig": "pybuda.backend_build.kernels", "graph_kernels": "pybuda.backend_build.kernels",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    """Import the submodule that defines ``name`` on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pybuda.backend_build' has no attribute {name!r}")
