"""Helpers for the PyTorch frontend tests: capture a module, run the captured graph, compare with torch."""

from types import SimpleNamespace
from typing import Sequence

import pytest
import torch

from pybuda.config import CompilerConfig
from pybuda.verify import calculate_pcc

# Named tolerances (float32 on CPU: the captured graph runs the same torch kernels in a different
# composition, so differences are rounding-level).
PCC = 0.99
ATOL = 1e-4
RTOL = 1e-4


def no_fallback_config() -> CompilerConfig:
    """A config with CPU fallback off, so any unmapped op fails the test loudly."""
    cfg = CompilerConfig()
    cfg.enable_tvm_cpu_fallback = False
    return cfg


def torch_outputs(module: torch.nn.Module, inputs: Sequence[torch.Tensor]):
    """The module's flat tensor outputs in eager PyTorch."""
    with torch.no_grad():
        out = module(*inputs)
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def assert_matches(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], pcc: float = PCC,
                   atol: float = ATOL, rtol: float = RTOL) -> None:
    """Same count, shapes and dtypes; allclose(atol, rtol) and PCC >= pcc for every output."""
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert tuple(g.shape) == tuple(w.shape), f"output {i}: shape {tuple(g.shape)} != {tuple(w.shape)}"
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype} != {w.dtype}"
        if w.dtype == torch.bool or not w.is_floating_point():
            assert torch.equal(g, w), f"output {i}: values differ"
            continue
        assert torch.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True), \
            f"output {i}: max abs diff {(g - w).abs().max().item():.3g} > atol {atol}"
        if w.numel() > 1:
            assert calculate_pcc(g, w) >= pcc


def _check_capture(module: torch.nn.Module, *inputs: torch.Tensor, atol: float = ATOL, rtol: float = RTOL,
                   config=None):
    from pybuda.frontend.torch import capture

    module = module.eval()
    result = capture(module, inputs, config=config or no_fallback_config())
    assert_matches(result.run(*inputs), torch_outputs(module, inputs), atol=atol, rtol=rtol)
    return result


@pytest.fixture
def fe():
    """Frontend test helpers: ``check(module, *inputs)`` (capture with fallback off, run, compare with
    torch; returns the CaptureResult), ``matches``, ``torch_outputs``, ``no_fallback``."""
    return SimpleNamespace(check=_check_capture, matches=assert_matches, torch_outputs=torch_outputs,
                           no_fallback=no_fallback_config)
