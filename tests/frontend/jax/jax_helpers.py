"""Helpers for the JAX frontend tests (a uniquely named module: a test importing ``conftest`` gets whichever
conftest was imported first): capture a JAX function, run the graph on the CPU reference and compare
with JAX itself."""


import numpy as np
import pytest
import torch

import pybuda
from pybuda.verify import calculate_pcc

jax = pytest.importorskip("jax")

# Named tolerances at Float32. On the CPU reference the graph runs torch kernels in a different composition
# from XLA's (and erf is a 1.2e-7-accurate polynomial made of device ops): rounding-level differences.
PCC = 0.99
ATOL = 1e-5
RTOL = 1e-4
# On the simulated chip at Float32 a matmul reads its operands through 19-bit (TF32-like) source registers,
# so every product carries about 1e-3 relative error (see tests/ops/test_api_ops.py).
DEVICE_ATOL = 2e-2
DEVICE_RTOL = 2e-2


def jax_outputs(fn, inputs, params=None):
    """The flat outputs of ``fn`` run in JAX, as torch tensors."""
    out = fn(*inputs) if params is None else fn(params, *inputs)
    return [torch.from_numpy(np.array(leaf)) for leaf in jax.tree_util.tree_leaves(out)]


def assert_matches(got, want, pcc=PCC, atol=ATOL, rtol=RTOL):
    """Same count, shapes and dtypes; allclose(atol, rtol) and PCC >= pcc for every float output."""
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert tuple(g.shape) == tuple(w.shape), f"output {i}: shape {tuple(g.shape)} != {tuple(w.shape)}"
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype} != {w.dtype}"
        if not w.is_floating_point():
            assert torch.equal(g, w), f"output {i}: values differ"
            continue
        assert torch.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True), \
            f"output {i}: max abs diff {(g - w).abs().max().item():.3g} > atol {atol}"
        if w.numel() > 1 and w.std() > 0:
            assert calculate_pcc(g, w) >= pcc


def check(fn, *inputs, params=None, atol=ATOL, rtol=RTOL, primitive=None):
    """Capture ``fn``, run the graph on the CPU reference, compare with JAX; returns the capture."""
    from pybuda.frontend.jax import capture

    result = capture(fn, inputs, params=params)
    if primitive is not None:
        assert primitive in result.primitive_counts, \
            f"'{primitive}' is not in the jaxpr: {sorted(result.primitive_counts)}"
    assert_matches(result.run(*inputs), jax_outputs(fn, inputs, params), atol=atol, rtol=rtol)
    return result


def run_on_tt(module, *inputs):
    """Compile for a Wormhole TTDevice at Float32 (HiFi4) and return the outputs as torch tensors."""
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     default_math_fidelity=pybuda.MathFidelity.HiFi4)
    tt = pybuda.TTDevice("tt0", module=module, arch=pybuda.BackendDevice.Wormhole_B0)
    tt.push_to_inputs(*inputs)
    out = pybuda.run_inference().get(timeout=300)
    return [o.value() if hasattr(o, "value") else o for o in out]
