"""A JAX function the device would run sample by sample must not mix the samples of a push: a parameter whose
dim 0 meets the batch's broadcast against it gave a (9, 4) output for a (3, 4) one, with no error."""

import numpy as np
import pytest
import torch

import pybuda
from pybuda.errors import CompileError
from pybuda.verify import calculate_pcc

jnp = pytest.importorskip("jax.numpy")

W = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
X = torch.from_numpy(np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32))


def _mixing(params, x):
    return jnp.tanh(x @ params["w"]) + params["c"]  # c is [3, 4]: one row per sample of a 3-sample push


def _per_sample(params, x):
    return jnp.tanh(x @ params["w"]) + params["c"]  # c is [1, 4]: the same row for every sample


def test_a_function_that_mixes_the_samples_is_a_clear_error():
    params = {"w": W, "c": np.ones((3, 4), np.float32)}
    pybuda.TTDevice("tt0", module=pybuda.JaxModule("mixing", _mixing, params), arch=pybuda.BackendDevice.Wormhole_B0)
    try:
        with pytest.raises(CompileError, match="mixes the samples of a microbatch: its output 0 is"):
            pybuda.run_inference(inputs=[(X,)]).get(timeout=600)
    finally:
        pybuda.shutdown()


def test_a_per_sample_function_runs_a_push_of_three():
    params = {"w": W, "c": np.ones((1, 4), np.float32)}
    pybuda.TTDevice("tt0", module=pybuda.JaxModule("per_sample", _per_sample, params),
                    arch=pybuda.BackendDevice.Wormhole_B0)
    try:
        got = pybuda.run_inference(inputs=[(X,)]).get(timeout=600)[0].value()
    finally:
        pybuda.shutdown()
    want = torch.from_numpy(np.asarray(_per_sample(params, X.numpy())))
    assert got.shape == want.shape and calculate_pcc(got, want) >= 0.99
