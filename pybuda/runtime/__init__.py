"""The runtime: devices, pipelines and the run API (TT-Buda's ``pybuda.run`` and device classes).

Modules: :mod:`~pybuda.runtime.device` (the Device base; its parts: :mod:`~pybuda.runtime.device_inputs`,
input validation; :mod:`~pybuda.runtime.device_loop`, the command interpreter;
:mod:`~pybuda.runtime.cpueval`, the CPU reference),
:mod:`~pybuda.runtime.cpudevice`, :mod:`~pybuda.runtime.ttdevice`, :mod:`~pybuda.runtime.api` (run
functions), :mod:`~pybuda.runtime.context` (execution modes, failure handling, shutdown),
:mod:`~pybuda.runtime.backend_api` (the compile/executor seam a backend plugs into),
:mod:`~pybuda.runtime.stages` (framework modules and CPU-fallback devices),
:mod:`~pybuda.runtime.transport` (queues and bounded waits), :mod:`~pybuda.runtime.commands`.
"""

from pybuda.runtime.api import (  # noqa: F401
    detect_available_devices, error_raised, get_checkpoint_queue, get_intermediates_queue, get_loss_queue,
    get_parameter_checkpoint, get_parameter_gradients, initialize_pipeline, is_silicon, pybuda_reset, run_backward,
    run_forward, run_generate, run_generative_inference, run_inference, run_optimizer, run_schedulers, run_training,
    set_device_pipeline, shutdown, sync, update_device_parameters,
)
from pybuda.runtime.cpudevice import CPUDevice  # noqa: F401
from pybuda.runtime.device import Device  # noqa: F401
from pybuda.runtime.gpudevice import GPUDevice  # noqa: F401
from pybuda.runtime.transport import OutputQueue  # noqa: F401
from pybuda.runtime.ttdevice import TTCluster, TTDevice  # noqa: F401

__all__ = [
    "Device", "CPUDevice", "GPUDevice", "TTDevice", "TTCluster", "OutputQueue",
    "run_inference", "run_training", "initialize_pipeline", "run_forward", "run_backward", "run_optimizer",
    "run_schedulers", "get_parameter_checkpoint", "get_parameter_gradients", "update_device_parameters",
    "shutdown", "sync", "error_raised", "detect_available_devices", "pybuda_reset", "set_device_pipeline",
    "get_loss_queue", "get_checkpoint_queue", "get_intermediates_queue", "is_silicon", "run_generate",
    "run_generative_inference",
]
