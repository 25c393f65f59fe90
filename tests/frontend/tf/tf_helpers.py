"""Helpers of the TensorFlow-family frontend tests: small Keras models, a Float32 Wormhole run, PCC checks.

(No ``__init__.py`` in this folder and no module named ``tensorflow`` here: either would shadow the real
package.)"""

from __future__ import annotations

import os
from typing import Sequence

import torch

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ start-up chatter

import pybuda  # noqa: E402
from pybuda.verify import calculate_pcc  # noqa: E402

#: Named tolerances of the Float32 golden device (HiFi4) against TensorFlow. A matmul/conv reads its
#: operands through 19-bit (TF32-like) source registers, so products carry ~1e-3 relative error.
PCC_MIN = 0.99
DEVICE_ATOL = 2e-2
DEVICE_RTOL = 2e-2
#: Deep random-weight CNNs (ResNet-50, MobileNetV2) accumulate that rounding over ~50 layers.
DEEP_ATOL = 5e-2
DEEP_RTOL = 5e-2


def fp32_wormhole(module, *inputs):
    """Compile ``module`` for a simulated Wormhole B0 TTDevice at Float32 (HiFi4, Float32 fallback format),
    run ``inputs`` once and return the outputs as torch tensors."""
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     accumulate_df=pybuda.DataFormat.Float32,
                                     math_fidelity=pybuda.MathFidelity.HiFi4)
    pybuda.TTDevice("tt0", module=module, arch=pybuda.BackendDevice.Wormhole_B0,
                    fp32_fallback=pybuda.DataFormat.Float32)
    out = pybuda.run_inference(inputs=[tuple(inputs)]).get(timeout=600)
    return [o.value() if hasattr(o, "value") else o for o in out]


def host_share(module, *inputs) -> float:
    """The host share of the ops in the module's fallback report (printed with the report)."""
    report = module.to_graph(*inputs).report
    print(report)
    return report.host_fraction


def assert_close(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], pcc: float = PCC_MIN,
                 atol: float = DEVICE_ATOL, rtol: float = DEVICE_RTOL) -> list:
    """Same count and shapes; PCC >= pcc and allclose(atol, rtol) per output. Returns the PCCs."""
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    pccs = []
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = g.float(), w.float()
        assert tuple(g.shape) == tuple(w.shape), f"output {i}: shape {tuple(g.shape)} != {tuple(w.shape)}"
        p = calculate_pcc(g, w)
        pccs.append(p)
        print(f"output {i}: pcc {p:.6f}, max abs diff {(g - w).abs().max().item():.3g}")
        assert p >= pcc, f"output {i}: pcc {p} < {pcc}"
        assert torch.allclose(g, w, atol=atol, rtol=rtol), \
            f"output {i}: max abs diff {(g - w).abs().max().item():.3g} > atol {atol}"
    return pccs
