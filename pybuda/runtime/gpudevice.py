"""GPUDevice: a CPUDevice whose PyTorch modules run on a CUDA GPU (TT-Buda's ``GPUDevice``).

Pushed tensors are moved to the GPU before each PyTorch module runs and its outputs come back to the host,
so the next device (a TTDevice or a CPUDevice) receives ordinary CPU tensors. PyBuda modules on a GPUDevice
run on the CPU reference, as on a CPUDevice. Without CUDA (``torch.cuda.is_available()`` is False) creating
one is a :class:`~pybuda.errors.ConfigError` that says so, rather than a silent run on the CPU.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import torch

from pybuda.errors import ConfigError
from pybuda.runtime.cpudevice import CPUDevice
from pybuda.runtime.push import InputItem


class GPUDevice(CPUDevice):
    """Runs PyTorch modules on ``torch.device(device)`` (default ``"cuda"``), the rest as a CPUDevice."""

    def __init__(self, name: str, optimizer_f: Optional[Callable] = None, scheduler_f: Optional[Callable] = None,
                 mp_context: Any = None, retain_backward_graph: bool = False,
                 module: Union[Any, List[Any], None] = None, input_dtypes: Optional[List[torch.dtype]] = None,
                 device: str = "cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"GPUDevice '{name}': no CUDA GPU is available to torch (torch.cuda.is_available() is "
                              f"False); use a CPUDevice, or install a CUDA build of torch on a machine with a GPU")
        self.torch_device = torch.device(device)
        super().__init__(name, optimizer_f=optimizer_f, scheduler_f=scheduler_f, mp_context=mp_context,
                         retain_backward_graph=retain_backward_graph, module=module, input_dtypes=input_dtypes)

    upcast_low_precision = False  # fp16/bf16 run natively on a GPU

    def _compile_sample(self, sample: InputItem, config: Any = None, verify_cfg: Any = None,
                        want_outputs: bool = True) -> InputItem:
        from pybuda.module import PyTorchModule

        for module in self.modules:
            if isinstance(module, PyTorchModule):
                module.module.to(self.torch_device)
        return InputItem(self._to_host(super()._compile_sample(sample, config, verify_cfg, want_outputs).tensors))

    def forward_one(self, item: InputItem) -> Tuple[torch.Tensor, ...]:
        return self._to_host(super().forward_one(item))

    def _run_module(self, module: Any, values: Sequence[torch.Tensor], names: Optional[Sequence[str]]):
        values = [v.to(self.torch_device) for v in values]
        return super()._run_module(module, values, names)

    @staticmethod
    def _to_host(values: Sequence[torch.Tensor]) -> Tuple[torch.Tensor, ...]:
        return tuple(v.detach().cpu() if isinstance(v, torch.Tensor) else v for v in values)
