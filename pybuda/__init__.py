"""pybuda: TT-Buda's API on a simulated Tenstorrent chip.

Names are imported lazily (PEP 562) so ``import pybuda`` stays fast and each stage is loaded only
when used. The table below is the public API; every name is documented where it is defined.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict

__version__ = "0.1.0"

_EXPORTS: Dict[str, str] = {
    # tensors and formats
    "Tensor": "pybuda.tensor", "Parameter": "pybuda.tensor", "TensorShape": "pybuda.tensor",
    "SomeTensor": "pybuda.tensor", "DataFormat": "pybuda.tensor", "MathFidelity": "pybuda.tensor",
    # modules
    "Module": "pybuda.module", "PyBudaModule": "pybuda.module", "PyTorchModule": "pybuda.module",
    "TFModule": "pybuda.module", "OnnxModule": "pybuda.module", "JaxModule": "pybuda.module",
    "TFLiteModule": "pybuda.module", "TFGraphDefModule": "pybuda.module",
    # backend enums
    "BackendDevice": "pybuda.arch.types", "BackendType": "pybuda.arch.types",
    # configuration and overrides
    "CompilerConfig": "pybuda.config", "CompileDepth": "pybuda.config", "PerfTraceLevel": "pybuda.config",
    "DeviceMode": "pybuda.config", "DRAMPlacementAlgorithm": "pybuda.config",
    "set_configuration_options": "pybuda.config", "set_epoch_break": "pybuda.config",
    "set_chip_break": "pybuda.config", "override_op_size": "pybuda.config",
    "override_t_stream_dir": "pybuda.config", "override_t_stream_shape": "pybuda.config",
    "override_u_kt": "pybuda.config", "override_dram_parameters": "pybuda.config",
    "override_op_placement": "pybuda.config", "override_dram_queue_placement": "pybuda.config",
    "configure_mixed_precision": "pybuda.config", "add_cpu_fallback_ops": "pybuda.config",
    "remove_cpu_fallback_ops": "pybuda.config", "override_input_buffer_multiplier": "pybuda.config",
    "internal_override_output_buffer_multiplier": "pybuda.config", "insert_nop": "pybuda.config",
    "insert_buffering_nop": "pybuda.config", "add_schedule_constraint": "pybuda.config",
    "insert_fracture_group": "pybuda.config", "set_num_repeated_patterns": "pybuda.config",
    "set_auto_transposing_placement": "pybuda.config", "query": "pybuda.config",
    # compile
    "pybuda_compile": "pybuda.compile", "CompileResults": "pybuda.compile",
    # verification
    "VerifyConfig": "pybuda.verify",
    # devices and runtime
    "Device": "pybuda.runtime", "CPUDevice": "pybuda.runtime", "TTDevice": "pybuda.runtime",
    "GPUDevice": "pybuda.runtime", "TTCluster": "pybuda.runtime",
    "run_inference": "pybuda.runtime", "run_training": "pybuda.runtime", "initialize_pipeline": "pybuda.runtime",
    "run_forward": "pybuda.runtime", "run_backward": "pybuda.runtime", "run_optimizer": "pybuda.runtime",
    "get_parameter_checkpoint": "pybuda.runtime", "get_parameter_gradients": "pybuda.runtime",
    "update_device_parameters": "pybuda.runtime", "shutdown": "pybuda.runtime", "sync": "pybuda.runtime",
    "error_raised": "pybuda.runtime", "detect_available_devices": "pybuda.runtime",
    "is_silicon": "pybuda.runtime", "run_generate": "pybuda.runtime", "run_generative_inference": "pybuda.runtime",
    "get_checkpoint_queue": "pybuda.runtime", "compile_torch": "pybuda.frontend.torch_compile",
    "run_schedulers": "pybuda.runtime", "get_loss_queue": "pybuda.runtime",
    "get_intermediates_queue": "pybuda.runtime",
    "pybuda_reset": "pybuda.runtime", "set_device_pipeline": "pybuda.runtime",
    # device images
    "TTDeviceImage": "pybuda.tti",
    # training: optimizers and learning-rate schedulers
    "SGD": "pybuda.optimizers", "Adam": "pybuda.optimizers", "AdamW": "pybuda.optimizers",
    "LAMB": "pybuda.optimizers", "LARS": "pybuda.optimizers", "LearningRateScheduler": "pybuda.schedulers",
}

__all__ = sorted(_EXPORTS) + ["op", "errors", "optimizers", "schedulers"]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        if name in ("op", "errors", "ops", "ir", "verify", "config", "models", "frontend", "runtime", "optimizers",
                    "schedulers"):
            return importlib.import_module(f"pybuda.{name}")
        raise AttributeError(f"module 'pybuda' has no attribute '{name}'")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
