"""Flax models through JaxModule: compiled for a TTDevice (simulated Wormhole at Float32) and compared with
JAX; JaxModule on a CPUDevice; parameter names and conversions."""

import numpy as np
import pytest
import torch

jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")
jnp = jax.numpy

import pybuda  # noqa: E402
from pybuda.verify import calculate_pcc  # noqa: E402

from jax_helpers import DEVICE_ATOL, DEVICE_RTOL, PCC, assert_matches, run_on_tt  # noqa: E402


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(64)(x))
        x = nn.gelu(nn.Dense(32)(x))
        return nn.Dense(10)(x)


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Conv(8, (3, 3))(x)
        x = nn.BatchNorm(use_running_average=True)(x)
        x = nn.relu(x)
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
        x = nn.Conv(16, (3, 3), strides=(2, 2))(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))
        return nn.Dense(10)(x)


class Block(nn.Module):
    """A small transformer block: self-attention (dense q/k/v + softmax) and an MLP, each with LayerNorm."""

    heads: int = 2

    @nn.compact
    def __call__(self, x):
        b, s, d = x.shape
        hd = d // self.heads
        h = nn.LayerNorm()(x)
        q, k, v = (nn.Dense(d, name=n)(h).reshape(b, s, self.heads, hd) for n in ("query", "key", "value"))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd)
        probs = jax.nn.softmax(scores, axis=-1)
        att = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, d)
        x = x + nn.Dense(d, name="out")(att)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(d)(nn.gelu(nn.Dense(2 * d)(h), approximate=False))


def _perturb(variables, seed=1, scale=0.1):
    """Non-trivial values for every variable (batch-norm statistics and LayerNorm scales included)."""
    leaves, tree = jax.tree_util.tree_flatten(variables)
    r = np.random.default_rng(seed)
    new = []
    for leaf in leaves:
        noise = r.standard_normal(leaf.shape).astype(np.float32) * scale
        new.append(np.abs(leaf + noise) + 0.5 if leaf.ndim == 1 and np.all(leaf == 1) else leaf + noise)
    return jax.tree_util.tree_unflatten(tree, new)


# A transformer block chains five matmuls (q/k/v, scores, context, output, MLP) through softmax and two
# LayerNorms; the TF32-like operand reads compound to a few 1e-2 on outputs of magnitude ~8 (PCC stays > 0.9999).
BLOCK_ATOL = 0.1


def _check_on_device(name, model, variables, x, atol=DEVICE_ATOL):
    module = pybuda.JaxModule(name, model, variables)
    want = list(module.forward(x))
    got = [g.float() for g in run_on_tt(module, torch.from_numpy(x))]
    assert_matches(got, want, atol=atol, rtol=DEVICE_RTOL)
    for g, w in zip(got, want):
        assert calculate_pcc(g, w) >= PCC


def test_flax_mlp_on_tt_device():
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    model = MLP()
    variables = model.init(jax.random.PRNGKey(0), x)
    _check_on_device("flax_mlp", model, variables, x)


def test_flax_cnn_on_tt_device():
    x = np.random.default_rng(0).standard_normal((2, 16, 16, 3)).astype(np.float32)
    model = CNN()
    variables = _perturb(model.init(jax.random.PRNGKey(0), x))
    _check_on_device("flax_cnn", model, variables, x)


def test_transformer_block_on_tt_device():
    # Head size 32 (one tile wide): the device splits heads along tile columns.
    x = np.random.default_rng(0).standard_normal((2, 32, 64)).astype(np.float32)
    model = Block()
    variables = _perturb(model.init(jax.random.PRNGKey(0), x), scale=0.05)
    _check_on_device("flax_block", model, variables, x, atol=BLOCK_ATOL)


def test_plain_function_with_params_on_tt_device():
    r = np.random.default_rng(3)
    params = {"w1": r.standard_normal((16, 32)).astype(np.float32) * 0.2, "b1": np.zeros(32, np.float32),
              "head": {"w": r.standard_normal((32, 4)).astype(np.float32) * 0.2}}

    def fn(p, x):
        return jax.nn.softmax(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["head"]["w"], axis=-1)

    module = pybuda.JaxModule("fn", fn, params)
    assert sorted(p.get_name() for p in module.get_parameters()) == ["b1", "head.w", "w1"]
    x = r.standard_normal((3, 16)).astype(np.float32)
    got = run_on_tt(module, torch.from_numpy(x))
    assert_matches([g.float() for g in got], list(module.forward(x)), atol=DEVICE_ATOL, rtol=DEVICE_RTOL)


def test_parameters_are_named_by_pytree_path():
    x = np.ones((2, 16, 16, 3), np.float32)
    model = CNN()
    variables = model.init(jax.random.PRNGKey(0), x)
    module = pybuda.JaxModule("cnn", model, variables)
    params = {p.get_name(): p for p in module.get_parameters()}
    assert "Dense_0.kernel" in params and "Conv_1.bias" in params
    assert "batch_stats.BatchNorm_0.mean" in params
    assert params["Dense_0.kernel"].requires_grad and not params["batch_stats.BatchNorm_0.mean"].requires_grad
    graph = module.to_graph(torch.from_numpy(x)).graph
    assert {n.name for n in graph.parameters} == set(params)
    assert [n.name for n in graph.inputs] == ["x"]


def test_forward_takes_torch_numpy_and_jax_inputs():
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    model = MLP()
    module = pybuda.JaxModule("mlp", model, model.init(jax.random.PRNGKey(0), x))
    outs = [module.forward(v)[0] for v in (x, torch.from_numpy(x), jnp.asarray(x))]
    assert all(isinstance(o, torch.Tensor) and o.shape == (4, 10) for o in outs)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_jax_module_on_cpu_device(monkeypatch):
    monkeypatch.setenv("PYBUDA_FORCE_THREADS", "1")
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    model = MLP()
    module = pybuda.JaxModule("mlp", model, model.init(jax.random.PRNGKey(0), x))
    pybuda.CPUDevice("cpu0", module=module)
    out = pybuda.run_inference(inputs=[(torch.from_numpy(x),)]).get(timeout=120)
    assert_matches([out[0].value()], list(module.forward(x)), atol=1e-5)


def test_jax_module_rejects_non_callables():
    from pybuda.errors import ModuleError

    with pytest.raises(ModuleError, match="JaxModule"):
        pybuda.JaxModule("bad", 42)


def test_function_without_params_and_pytree_outputs():
    def fn(x, y):
        return {"sum": x + y, "prod": jnp.tanh(x * y)}

    module = pybuda.JaxModule("noparams", fn)
    x, y = torch.randn(32, 32), torch.randn(32, 32)
    assert module.get_parameters() == []
    want = list(module.forward(x, y))  # leaves in key order: prod, sum
    got = run_on_tt(module, x, y)
    assert_matches([g.float() for g in got], want, atol=DEVICE_ATOL, rtol=DEVICE_RTOL)  # SFPU tanh


def test_unsupported_primitive_on_tt_device_lists_every_one_with_fallback_off():
    from pybuda.errors import UnsupportedOpError

    def fn(x):
        return jnp.floor(x) + jnp.round(x) + jnp.floor(2 * x)

    module = pybuda.JaxModule("floors", fn)
    pybuda.set_configuration_options(enable_tvm_cpu_fallback=False)
    with pytest.raises(UnsupportedOpError) as info:
        run_on_tt(module, torch.randn(32, 32))
    assert {op.framework_op for op in info.value.ops} == {"jax.lax.floor (x2)", "jax.lax.round (x1)"}


def test_unsupported_primitives_run_in_jax_on_the_host_with_fallback_on():
    # floor and lgamma have no device form: floor (and the add after it) run in a CPU post stage, lgamma in a
    # CPU pre stage; the matmul and tanh stay on the device.
    from pybuda.frontend.jax import capture

    w = jnp.asarray(np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32) * 0.2)

    def fn(params, x):
        h = jnp.tanh(x @ params["w"])
        return jnp.floor(h * 3) + jnp.exp(h), jax.lax.lgamma(x)

    x = torch.randn(32, 64)
    result = capture(fn, (x,), params={"w": w}, for_device=True, fallback=True)
    report = result.report
    assert {op.aten_op for op in report.fallback_ops} == {"jax.lax.floor", "jax.lax.lgamma"}
    assert {op.side for op in report.fallback_ops} == {"pre", "post"}
    assert any("lgamma" in op.aten_op for op in report.fallback_ops)
    assert result.pre is not None and result.post is not None and report.device_ops >= 2

    module = pybuda.JaxModule("floor_lgamma", fn, params={"w": w})
    got = run_on_tt(module, x)
    want = list(module.forward(x))
    assert len(got) == 2
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)  # the lgamma ran in JAX
    # floor(3 tanh) jumps by 1 where the device's Float32 matmul rounds across an integer: compare the rest.
    close = (got[0] - want[0]).abs() <= DEVICE_ATOL
    assert float(close.float().mean()) > 0.98


@pytest.mark.parametrize("device_reads_it_too", [False, True])
def test_a_post_stage_computes_what_it_reads_of_the_parameters(device_reads_it_too):
    # The bias reshape reads only a parameter; the floor after the device's matmuls sends the add reading it
    # to a CPU post stage. Computed on the device, the reshaped bias crossed as one sample beside the
    # microbatch's tensors, and the post stage refused the push ("inputs disagree on the microbatch size").
    r = np.random.default_rng(0)
    params = {"w": jnp.asarray(r.standard_normal((32, 32)).astype(np.float32) * 0.2),
              "b": jnp.asarray(r.standard_normal(32).astype(np.float32))}

    def fn(p, x):
        bias = p["b"].reshape(1, 1, 32) * 2
        h = jnp.tanh(jnp.tanh(x @ p["w"]) @ p["w"])
        if device_reads_it_too:
            h = h + bias
        return jnp.floor(h * 3) + bias

    from pybuda.frontend.jax import capture

    x = torch.randn(2, 8, 32)
    assert capture(fn, (x,), params=params, for_device=True, fallback=True).post is not None
    module = pybuda.JaxModule("post_bias", fn, params=params)
    got = run_on_tt(module, x)[0]
    want = list(module.forward(x))[0]
    # floor(3 h) jumps by 1 where the device's Float32 matmul rounds across an integer: compare the rest.
    assert float(((got - want).abs() <= DEVICE_ATOL).float().mean()) > 0.98


class GRUOverTime(nn.Module):
    """Flax's nn.RNN: a lax.scan over the time axis (time-major inside), the last step read out."""

    @nn.compact
    def __call__(self, x):  # [b, time, features]
        y = nn.RNN(nn.GRUCell(16))(x)
        back = nn.RNN(nn.OptimizedLSTMCell(8), reverse=True, keep_order=True)(x)
        return nn.Dense(4)(y[:, -1]) + nn.Dense(4)(back[:, 0])


class ScannedLayers(nn.Module):
    """Three residual layers with their parameters stacked by nn.scan (one lax.scan over the layer axis)."""

    @nn.compact
    def __call__(self, x):
        class Layer(nn.Module):
            @nn.compact
            def __call__(self, carry, _):
                return carry + nn.Dense(carry.shape[-1])(nn.LayerNorm()(carry)), None

        stack = nn.scan(Layer, variable_axes={"params": 0}, split_rngs={"params": True}, length=3)
        return stack()(x, None)[0]


def _matches_on_tt(name, model, variables, x):
    """``model`` on a Float32 TTDevice matches JAX; returns the TTDevice (to ask where it ran)."""
    module = pybuda.JaxModule(name, model, variables)
    want = list(module.forward(x))
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     default_math_fidelity=pybuda.MathFidelity.HiFi4)
    tt = pybuda.TTDevice("tt0", module=module, arch=pybuda.BackendDevice.Wormhole_B0)
    tt.push_to_inputs(torch.from_numpy(x))
    got = [o.value().float() for o in pybuda.run_inference().get(timeout=300)]
    assert_matches(got, want, atol=DEVICE_ATOL, rtol=DEVICE_RTOL)
    return tt


def _no_fallback_on_tt(name, model, variables, x):
    """``model`` wholly on a Float32 TTDevice, matching JAX."""
    tt = _matches_on_tt(name, model, variables, x)
    assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None


@pytest.mark.parametrize("model,shape", [(GRUOverTime(), (2, 6, 5)), (ScannedLayers(), (2, 4, 8))],
                         ids=["rnn", "scanned_layers"])
def test_a_scan_is_unrolled_onto_the_device(model, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    _no_fallback_on_tt(type(model).__name__, model, model.init(jax.random.PRNGKey(0), x), x)


def test_a_scan_too_long_to_unroll_runs_on_the_host_before_the_device(monkeypatch):
    # Its result is time-major ([time, batch, ...]): it crosses to the device with a sample dim of its own (the
    # device was compiled for a microbatch of time x batch and refused the push).
    import importlib

    monkeypatch.setattr(importlib.import_module("pybuda.frontend.jax.scan"), "MAX_SCAN_STEPS", 4)
    x = np.random.default_rng(1).standard_normal((2, 6, 5)).astype(np.float32)
    model = GRUOverTime()
    assert _matches_on_tt("long_rnn", model, model.init(jax.random.PRNGKey(0), x), x).cpu_fallback_device_pre is not None


class TopKReadout(nn.Module):
    """Values read at a top-k's indices (``jnp.take_along_axis``: JAX wraps negative indices with a ``where``, which
    the indices' proven range decides), a one-hot of the argmax, a log-sum-exp (``jnp.isfinite`` inside)."""

    @nn.compact
    def __call__(self, x):  # [b, 12]
        h = nn.Dense(10)(x)
        values, idx = jax.lax.top_k(h, 3)
        picked = jnp.take_along_axis(x[:, :10], idx, axis=-1)
        return values + picked, jax.nn.one_hot(jnp.argmax(h, -1), 10) * h, jax.nn.logsumexp(h, -1)


@pytest.mark.parametrize("batch", [1, 2])
def test_take_along_axis_at_top_k_indices_and_logsumexp_run_on_the_device(batch):
    x = np.random.default_rng(2).standard_normal((batch, 12)).astype(np.float32)
    model = TopKReadout()
    _no_fallback_on_tt("topk_readout", model, model.init(jax.random.PRNGKey(0), x), x)


class SpectralMix(nn.Module):
    """FFTs as FNet and spectral filters use them: rfft / irfft, a complex fft and ifft read back as real parts, a 2-D
    rfft, lax.complex building a spectrum, and complex arithmetic on spectra (a learned filter)."""

    @nn.compact
    def __call__(self, x):  # [b, 16]
        spec = jnp.fft.rfft(x, axis=-1)
        feats = nn.Dense(8)(jnp.concatenate([spec.real, spec.imag], -1))
        smooth = jnp.fft.irfft(jax.lax.complex(spec.real * 0.5, spec.imag), n=16)
        mixed = jnp.fft.ifft(jnp.fft.fft(x)).real + jnp.fft.fft(x).imag
        grid = jnp.fft.rfft2(x.reshape(x.shape[0], 4, 4)).real.reshape(x.shape[0], -1)
        w = self.param("filter", nn.initializers.normal(0.5), (9,))
        filtered = jnp.fft.irfft(spec * jax.lax.complex(w, -w) - spec.conj() * 0.5 + 1.0, n=16)  # a spectral filter
        return feats, smooth, mixed, grid, filtered


def test_ffts_run_on_the_device():
    x = np.random.default_rng(4).standard_normal((2, 16)).astype(np.float32)
    model = SpectralMix()
    _no_fallback_on_tt("spectral", model, model.init(jax.random.PRNGKey(0), x), x)


class ComplexSqrtBetween(nn.Module):
    """A complex square root (no device form) between an rfft and an irfft: the complex values stay on the host
    side of every stage boundary."""

    @nn.compact
    def __call__(self, x):  # [b, 16]
        h = nn.Dense(16)(x)
        spec = jnp.sqrt(jnp.fft.rfft(h) + 1.0)
        return nn.Dense(4)(jnp.fft.irfft(spec, n=16) + h)


def test_a_complex_op_without_a_device_form_takes_its_complex_neighbours_to_the_host():
    x = np.random.default_rng(5).standard_normal((2, 16)).astype(np.float32)
    model = ComplexSqrtBetween()
    module = pybuda.JaxModule("csqrt", model, model.init(jax.random.PRNGKey(0), x))
    want = list(module.forward(x))
    got = [g.float() for g in run_on_tt(module, torch.from_numpy(x))]
    assert_matches(got, want, atol=DEVICE_ATOL, rtol=DEVICE_RTOL)


def test_take_along_axis_at_a_constant_index_outside_the_axis_stays_on_the_host():
    # JAX fills the result there (NaN); a clamped device gather had returned the last element instead.
    from pybuda.frontend.jax import capture

    idx = jnp.array([[0, 7], [1, 4]])
    fn = lambda x: jnp.take_along_axis(x, idx, axis=-1) * 2.0  # noqa: E731
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    result = capture(fn, (x,), for_device=True)
    assert "outside the axis" in str(result.report)
    got = result.run(x)[0]
    assert torch.isnan(got[0, 1]) and torch.equal(got[1], torch.tensor([12.0, 18.0]))
