"""Each lax primitive the JAX frontend maps, captured and run on the CPU reference against JAX (Float32)."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

from pybuda.errors import UnsupportedOpError  # noqa: E402

_R = np.random.default_rng(7)


def rn(*shape):
    return _R.standard_normal(shape).astype(np.float32)


def pos(*shape):
    return (_R.random(shape) + 0.5).astype(np.float32)


_A, _B = rn(2, 3, 5), rn(2, 3, 5)

# (id, function, inputs, primitive that must appear in the jaxpr)
CASES = [
    ("add", lambda x, y: x + y, (_A, _B), "add"),
    ("sub", lambda x, y: x - y, (_A, _B), "sub"),
    ("mul", lambda x, y: x * y, (_A, _B), "mul"),
    ("div", lambda x, y: x / (jnp.abs(y) + 0.5), (_A, _B), "div"),
    ("div_const", lambda x: x / 3.0, (_A,), "div"),
    ("max", lambda x, y: jnp.maximum(x, y), (_A, _B), "max"),
    ("min", lambda x, y: jnp.minimum(x, y), (_A, _B), "min"),
    ("relu_max0", lambda x: jnp.maximum(x, 0.0), (_A,), "max"),
    ("neg", lambda x: -x, (_A,), "neg"),
    ("exp", jnp.exp, (_A,), "exp"),
    ("log", jnp.log, (pos(3, 4),), "log"),
    ("log1p", jnp.log1p, (pos(3, 4),), "log1p"),
    ("expm1", jnp.expm1, (_A,), "expm1"),
    ("tanh", jnp.tanh, (_A,), "tanh"),
    ("logistic", jax.nn.sigmoid, (_A,), "logistic"),
    ("sqrt", jnp.sqrt, (pos(3, 4),), "sqrt"),
    ("rsqrt", lax.rsqrt, (pos(3, 4),), "rsqrt"),
    ("pow", lambda x, y: jnp.power(x, y), (pos(3, 4), rn(3, 4)), "pow"),
    ("pow_scalar", lambda x: x ** 1.7, (pos(3, 4),), "pow"),
    ("integer_pow3", lambda x: x ** 3, (_A,), "integer_pow"),
    ("integer_pow_neg2", lambda x: x ** -2, (pos(3, 4),), "integer_pow"),
    ("square", jnp.square, (_A,), "square"),
    ("erf", lax.erf, (rn(4, 33) * 2,), "erf"),
    ("erfc", lax.erfc, (rn(4, 33) * 2,), "erfc"),
    ("abs", jnp.abs, (_A,), "abs"),
    ("sign", jnp.sign, (np.array([[-2.0, 0.0, 3.0, -0.5]], np.float32),), "sign"),
    ("sin_cos", lambda x: jnp.sin(x) + jnp.cos(x), (_A,), "sin"),
    ("clamp", lambda x: lax.clamp(-0.5, x, 0.7), (_A,), "clamp"),
    ("clip", lambda x: jnp.clip(x, -0.5, 0.7), (_A,), "max"),
    ("dot_matvec", lambda x, y: x @ y, (rn(3, 6), rn(6)), "dot_general"),
    ("reduce_sum", lambda x: jnp.sum(x, axis=(0, 2)), (_A,), "reduce_sum"),
    ("reduce_sum_all", jnp.sum, (_A,), "reduce_sum"),
    ("mean", lambda x: jnp.mean(x, axis=-1, keepdims=True), (_A,), "reduce_sum"),
    ("var", lambda x: jnp.var(x, axis=1), (_A,), "reduce_sum"),
    ("reduce_max", lambda x: jnp.max(x, axis=1), (_A,), "reduce_max"),
    ("reduce_min", lambda x: jnp.min(x, axis=(1, 2)), (_A,), "reduce_min"),
    ("argmax", lambda x: jnp.argmax(x, axis=-1), (_A,), "argmax"),
    ("argmin", lambda x: jnp.argmin(x, axis=1), (_A,), "argmin"),
    ("cumsum", lambda x: jnp.cumsum(x, axis=1), (_A,), "cumsum"),
    ("broadcast_in_dim", lambda x: jnp.broadcast_to(x[:, None, :], (3, 4, 5)), (rn(3, 5),), "broadcast_in_dim"),
    ("reshape", lambda x: x.reshape(6, 5), (_A,), "reshape"),
    ("transpose", lambda x: jnp.transpose(x, (2, 0, 1)), (_A,), "transpose"),
    ("squeeze", lambda x: jnp.squeeze(x, 1), (rn(3, 1, 4),), "squeeze"),
    ("expand_dims", lambda x: jnp.expand_dims(x, 1) * 2.0, (rn(3, 4),), "broadcast_in_dim"),
    ("concatenate", lambda x, y: jnp.concatenate([x, y, x], axis=1), (_A, _B), "concatenate"),
    ("slice", lambda x: x[:, 1:3, ::2], (_A,), "slice"),
    ("dynamic_slice", lambda x: lax.dynamic_slice(x, (0, 1, 2), (2, 2, 3)), (_A,), "dynamic_slice"),
    ("dynamic_slice_clamped", lambda x: lax.dynamic_slice(x, (0, 2, 4), (1, 2, 3)), (_A,), "dynamic_slice"),
    ("split", lambda x: jnp.split(x, [2, 4], axis=2), (_A,), None),
    ("pad", lambda x: jnp.pad(x, ((0, 0), (1, 2), (2, 1))), (_A,), "pad"),
    ("pad_value_leading", lambda x: jnp.pad(x, ((1, 0), (0, 0), (0, 0)), constant_values=1.5), (_A,), "pad"),
    ("pad_negative", lambda x: lax.pad(x, 0.0, ((0, 0, 0), (-1, 1, 0), (1, -2, 0))), (_A,), "pad"),
    ("select_n", lambda x, y: jnp.where(x > y, x, y * 2), (_A, _B), "select_n"),
    ("comparisons", lambda x, y: [x == y, x != y, x < y, x <= y, x > y, x >= y], (_A, _B), "lt"),
    ("logical", lambda x, y: jnp.logical_or(x > 0, jnp.logical_not(y > 0)) & (x < 1), (_A, _B), "or"),
    ("convert_element_type", lambda x: (x > 0).astype(jnp.float32) + x, (_A,), "convert_element_type"),
    ("iota", lambda x: x + jnp.arange(5, dtype=jnp.float32), (_A,), "iota"),
    ("constant", lambda x: x * jnp.array([1.0, 2.0, 3.0, 4.0, 5.0], jnp.float32), (_A,), "mul"),
    ("stop_gradient", lambda x: lax.stop_gradient(x) * 2, (_A,), "stop_gradient"),
    ("rev", lambda x: jnp.flip(x, axis=2), (_A,), "rev"),
    ("softmax", lambda x: jax.nn.softmax(x, axis=-1), (_A,), "reduce_max"),
    ("log_softmax", lambda x: jax.nn.log_softmax(x, axis=1), (_A,), "reduce_max"),
    ("gelu_tanh", lambda x: jax.nn.gelu(x, approximate=True), (_A,), "tanh"),
    ("gelu_exact", lambda x: jax.nn.gelu(x, approximate=False), (_A,), "erfc"),
    ("relu_custom_jvp", jax.nn.relu, (_A,), "max"),
    ("silu", jax.nn.silu, (_A,), "logistic"),
    ("jit_inlined", jax.jit(lambda x: jnp.tanh(x) * 2), (_A,), "tanh"),
    ("dot_2d", lambda x, y: x @ y, (rn(4, 6), rn(6, 3)), "dot_general"),
    ("dot_dense_3d", lambda x, y: x @ y, (rn(2, 4, 6), rn(6, 3)), "dot_general"),
    ("dot_nt", lambda x, y: x @ y.T, (rn(4, 6), rn(3, 6)), "dot_general"),
    ("dot_batched", lambda x, y: jnp.einsum("bij,bjk->bik", x, y), (rn(2, 4, 6), rn(2, 6, 3)), "dot_general"),
    ("dot_attention", lambda q, k: jnp.einsum("bqhd,bkhd->bhqk", q, k), (rn(2, 5, 3, 4), rn(2, 7, 3, 4)),
     "dot_general"),
    ("dot_multi_contract", lambda x, y: jnp.einsum("abc,bcd->ad", x, y), (rn(2, 3, 4), rn(3, 4, 5)),
     "dot_general"),
    ("dot_vector", lambda x, y: jnp.dot(x, y), (rn(6), rn(6, 3)), "dot_general"),
]


@pytest.mark.parametrize("fn,inputs,primitive", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_primitive_matches_jax(jfe, fn, inputs, primitive):
    jfe.check(fn, *inputs, primitive=primitive)


def _conv(x, w, **kw):
    return lax.conv_general_dilated(x, w, **kw)


CONV_CASES = [
    ("nchw", rn(2, 3, 9, 10), rn(4, 3, 3, 3), dict(window_strides=(1, 1), padding="SAME")),
    ("nhwc_hwio", rn(2, 9, 10, 3), rn(3, 3, 3, 4),
     dict(window_strides=(1, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    ("stride2_even_kernel_same", rn(1, 8, 8, 3), rn(4, 4, 3, 5),
     dict(window_strides=(2, 2), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    ("explicit_padding_dilation", rn(1, 2, 11, 9), rn(3, 2, 3, 2),
     dict(window_strides=(1, 2), padding=((2, 1), (0, 3)), rhs_dilation=(2, 1))),
    ("groups", rn(1, 10, 10, 4), rn(3, 3, 2, 6),
     dict(window_strides=(1, 1), padding="VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=2)),
    ("depthwise", rn(1, 4, 8, 8), rn(4, 1, 3, 3), dict(window_strides=(1, 1), padding="SAME", feature_group_count=4)),
    ("mixed_layouts", rn(2, 3, 9, 10), rn(3, 3, 3, 4),
     dict(window_strides=(1, 1), padding="VALID", dimension_numbers=("NCHW", "HWIO", "NHWC"))),
    ("conv1d_nwc", rn(2, 12, 3), rn(3, 3, 5),
     dict(window_strides=(2,), padding="SAME", dimension_numbers=("NWC", "WIO", "NWC"))),
]


@pytest.mark.parametrize("x,w,kw", [c[1:] for c in CONV_CASES], ids=[c[0] for c in CONV_CASES])
def test_conv_general_dilated_matches_jax(jfe, x, w, kw):
    jfe.check(lambda a, b: _conv(a, b, **kw), x, w, primitive="conv_general_dilated", atol=1e-4)


# lax.conv_transpose (Flax's ConvTranspose) is a conv_general_dilated with lhs_dilation: the registry's
# conv2d_transpose with swapped, flipped weights and cropped padding.
TRANSPOSED_CASES = [
    ("s2_k2_valid", rn(2, 5, 6, 3), rn(2, 2, 3, 4), dict(strides=(2, 2), padding="VALID")),
    ("s2_k3_same", rn(1, 6, 5, 4), rn(3, 3, 4, 2), dict(strides=(2, 2), padding="SAME")),
    ("s3_k4_explicit", rn(1, 4, 4, 2), rn(4, 4, 2, 3), dict(strides=(3, 2), padding=((1, 2), (3, 0)))),
    ("dilated_kernel", rn(1, 5, 5, 2), rn(3, 3, 2, 2), dict(strides=(2, 2), padding="SAME", rhs_dilation=(2, 1))),
    ("transpose_kernel_nchw", rn(2, 3, 4, 5), rn(3, 3, 3, 4),
     dict(strides=(2, 2), padding="SAME", dimension_numbers=("NCHW", "HWOI", "NCHW"), transpose_kernel=True)),
    ("conv1d", rn(2, 7, 3), rn(3, 3, 4), dict(strides=(2,), padding="SAME", dimension_numbers=("NWC", "WIO", "NWC"))),
]


@pytest.mark.parametrize("x,w,kw", [c[1:] for c in TRANSPOSED_CASES], ids=[c[0] for c in TRANSPOSED_CASES])
def test_transposed_conv_matches_jax(jfe, x, w, kw):
    jfe.check(lambda a, b: lax.conv_transpose(a, b, **kw), x, w, primitive="conv_general_dilated", atol=1e-4)


def test_grouped_transposed_conv_matches_jax(jfe):
    dn = lax.conv_dimension_numbers((1, 6, 6, 4), (3, 3, 2, 6), ("NHWC", "HWIO", "NHWC"))
    jfe.check(lambda a, b: lax.conv_general_dilated(a, b, (1, 1), ((2, 1), (1, 2)), lhs_dilation=(2, 2),
                                                    dimension_numbers=dn, feature_group_count=2),
              rn(1, 6, 6, 4), rn(3, 3, 2, 6), primitive="conv_general_dilated", atol=1e-4)


def test_flax_conv_transpose_runs_on_the_device():
    nn = pytest.importorskip("flax.linen")
    from jax_helpers import DEVICE_ATOL, DEVICE_RTOL, assert_matches, run_on_tt

    import torch

    import pybuda
    from pybuda.frontend.jax import capture

    model = nn.ConvTranspose(6, (3, 3), strides=(2, 2), padding="SAME")
    x = rn(2, 5, 5, 4)
    variables = model.init(jax.random.PRNGKey(0), x)
    module = pybuda.JaxModule("conv_transpose", model, variables)
    assert capture(model, (x,), params=variables, for_device=True, fallback=True).report is None  # no fallback
    assert_matches(run_on_tt(module, torch.from_numpy(x)), list(module.forward(x)), atol=DEVICE_ATOL, rtol=DEVICE_RTOL)


POOL_CASES = [
    ("max_nhwc", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
     rn(2, 8, 8, 3)),
    ("max_nchw_same", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "SAME"),
     rn(2, 3, 9, 9)),
    ("sum_nhwc_padded", lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1),
                                                      ((0, 0), (1, 1), (1, 1), (0, 0))), rn(1, 6, 6, 2)),
    ("max_1d", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 1), (1, 2, 1), "VALID"), rn(2, 8, 3)),
]


@pytest.mark.parametrize("fn,x", [c[1:] for c in POOL_CASES], ids=[c[0] for c in POOL_CASES])
def test_reduce_window_matches_jax(jfe, fn, x):
    jfe.check(fn, x)


def test_flax_pooling_and_norms_match_jax(jfe):
    nn = pytest.importorskip("flax.linen")
    x = rn(2, 8, 8, 3)
    jfe.check(lambda a: nn.max_pool(a, (2, 2), strides=(2, 2)), x, primitive="reduce_window_max")
    jfe.check(lambda a: nn.avg_pool(a, (2, 2), strides=(2, 2), padding="SAME"), x,
              primitive="reduce_window_sum")
    ln = nn.LayerNorm()
    variables = ln.init(jax.random.PRNGKey(0), x)
    jfe.check(lambda v, a: ln.apply(v, a), x, params=variables)


def test_closure_constants_become_graph_constants(jfe):
    table = jnp.asarray(rn(5, 4))
    result = jfe.check(lambda x: x @ table, rn(3, 5))
    assert not result.graph.parameters
    assert any(n.kind == "constant" and n.shape == (5, 4) for n in result.graph.nodes.values())


def test_ops_are_named_and_tagged_from_the_jaxpr(jfe):
    nn = pytest.importorskip("flax.linen")
    dense = nn.Dense(3)
    x = rn(2, 4)
    variables = dense.init(jax.random.PRNGKey(0), x)
    result = jfe.check(lambda v, a: dense.apply(v, a), x, params=variables)
    ops = [n for n in result.graph.nodes.values() if n.kind == "op"]
    matmul = next(n for n in ops if n.op_type == "matmul")
    assert matmul.tags["jax"] == "dot_general"
    assert "test_jax_primitives.py" in matmul.tags["source"] or "linear.py" in matmul.tags["source"]
    assert sorted(p.name for p in result.graph.parameters) == ["bias", "kernel"] or \
        sorted(p.name for p in result.graph.parameters) == ["Dense_0.bias", "Dense_0.kernel"]


def test_unsupported_primitives_are_all_listed_with_counts_and_sources():
    from pybuda.frontend.jax import capture

    def fn(x):
        y = jnp.floor(x) + jnp.floor(x * 2)   # floor twice
        z = lax.lgamma(x)                     # lgamma once
        return jnp.tanh(y + z)                # mapped: still checked after the unmapped ones

    with pytest.raises(UnsupportedOpError) as info:
        capture(fn, (rn(3, 4),))
    ops = {op.framework_op: op for op in info.value.ops}
    assert set(ops) == {"jax.lax.floor (x2)", "jax.lax.lgamma (x1)"}
    assert "test_jax_primitives.py" in ops["jax.lax.floor (x2)"].location
    assert "floor" in str(info.value) and "lgamma" in str(info.value)


def test_dynamic_slice_with_traced_index_is_unsupported():
    from pybuda.frontend.jax import capture

    with pytest.raises(UnsupportedOpError, match="dynamic_slice"):
        capture(lambda x, i: lax.dynamic_slice(x, (i, 0), (1, 4)), (rn(3, 4), np.int32(1)))


def test_for_device_reports_ops_the_chip_cannot_run():
    from pybuda.frontend.jax import capture

    fn = lambda x: jnp.cumsum(x.astype(jnp.int32), axis=0)  # noqa: E731 - integer math stays on the host
    capture(fn, (rn(3, 4),))  # fine on the CPU reference
    with pytest.raises(UnsupportedOpError, match="cumsum"):
        capture(fn, (rn(3, 4),), for_device=True, fallback=False)
    # With CPU fallback (the config's default) the integer math runs in JAX on the host instead.
    x = rn(3, 4) * 10
    result = capture(fn, (x,), for_device=True)
    assert any("cumsum" in op.reason for op in result.report.fallback_ops)
    np.testing.assert_array_equal(result.run(x)[0].numpy(), np.cumsum(x.astype(np.int32), axis=0))


def test_to_jax_converts_tensors():
    import torch

    import pybuda
    from pybuda.frontend.jax import to_jax

    t = torch.randn(2, 3)
    for value in (t, pybuda.Tensor.create_from_torch(t), t.numpy()):
        arr = to_jax(value)
        assert isinstance(arr, jax.Array) and arr.shape == (2, 3)
        np.testing.assert_array_equal(np.asarray(arr), t.numpy())
    assert to_jax(t.to(torch.bfloat16)).dtype == jnp.bfloat16


def test_take_and_gather_match_jax(jfe):
    table = rn(20, 6)
    ids = np.array([[1, 5, 19], [0, 2, 2]], np.int32)
    result = jfe.check(lambda t, i: jnp.take(t, i, axis=0), table, ids)
    assert any(n.op_type == "embedding" for n in result.graph.nodes.values() if n.kind == "op")
    jfe.check(lambda x: jnp.take(x, jnp.array([3, 0, 1]), axis=2), _A, primitive="_take")
    jfe.check(lambda x, i: x[:, i], rn(4, 9), np.array([8, 1], np.int32), primitive="gather")


def test_flax_embed_matches_jax(jfe):
    nn = pytest.importorskip("flax.linen")
    embed = nn.Embed(30, 8)
    ids = np.array([[3, 7, 29, 0]], np.int32)
    variables = embed.init(jax.random.PRNGKey(0), ids)
    result = jfe.check(lambda v, i: embed.apply(v, i), ids, params=variables)
    assert [p.name for p in result.graph.parameters] == ["embedding"]


@jax.custom_vjp
def _clip_grad(x):
    return jnp.tanh(x) * 3.0


_clip_grad.defvjp(lambda x: (_clip_grad(x), x), lambda x, g: (g,))


def test_custom_vjp_remat_and_closed_calls_are_inlined(jfe):
    jfe.check(_clip_grad, _A)
    jfe.check(jax.checkpoint(lambda x: jnp.exp(x) * x), _A)
    jfe.check(lambda x: jax.jit(lambda y: jax.jit(jnp.sin)(y) + 1.0)(x), _A)


def test_updates_at_constant_indices_run_on_the_device(jfe):
    # x.at[idx].set / .add lower to JAX's scatter / scatter-add, which had no converter: with idx known at
    # capture time they are the torch frontend's index_put (gathers, wheres, a 0/1 matmul where indices repeat).
    idx = jnp.array([3, 0, -1, 3])
    cases = [(lambda x, v: jnp.asarray(x).at[idx].set(v * 2.0), rn(5, 4), rn(4, 4), "scatter"),
             (lambda x, v: jnp.asarray(x).at[:, idx].add(v), rn(2, 5, 3), rn(2, 4, 3), "scatter-add"),
             (lambda x: jnp.asarray(x).at[idx].add(1.0), rn(5, 4), None, "scatter-add")]
    for fn, x, v, primitive in cases:
        inputs = (x,) if v is None else (x, v)
        result = jfe.check(fn, *inputs, primitive=primitive)  # fallback off: an unmapped primitive raises
        assert "adv_index" not in {n.op_type for n in result.graph.ops}  # no host gather


def test_top_k_and_sorts_run_on_the_device(jfe):
    # top_k and sort (jnp.sort, jnp.argsort: a sort carrying an iota) had no converter; they are the torch
    # frontend's top_k and stable sort, and a carried float operand is gathered at the sort's indices.
    x, y = rn(3, 9), rn(3, 9)
    cases = [(lambda a: jax.lax.top_k(a, 3), "top_k"),
             (lambda a: jnp.sort(a, axis=0), "sort"),
             (lambda a: jnp.argsort(a, axis=-1), "sort"),
             (lambda a: jax.lax.sort((a, jnp.asarray(y)), dimension=1, num_keys=1)[1], "sort")]
    for fn, primitive in cases:
        result = jfe.check(fn, x, primitive=primitive)  # fallback off: an unmapped primitive raises
        assert "adv_index" not in {n.op_type for n in result.graph.ops}


def test_products_run_on_the_device(jfe):
    # reduce_prod and cumprod (also reversed) are the torch frontend's halving product and doubling scan.
    x = pos(3, 9)
    for fn, primitive in [(lambda a: jnp.prod(a, axis=1), "reduce_prod"), (lambda a: jnp.prod(a), "reduce_prod"),
                          (lambda a: jnp.cumprod(a, axis=1), "cumprod"),
                          (lambda a: jax.lax.cumprod(a, axis=0, reverse=True), "cumprod")]:
        jfe.check(fn, x, primitive=primitive)  # fallback off: an unmapped primitive raises


def test_3d_convolutions_run_as_2d_ones(jfe):
    # NCDHW and NDHWC (Flax's layout), strided, padded unevenly, dilated and grouped.
    def ncdhw(a, k):
        return lax.conv_general_dilated(a, k, (2, 1, 1), ((1, 0), (0, 1), (1, 1)), rhs_dilation=(1, 2, 1),
                                        feature_group_count=2)

    def ndhwc(a, k):
        return lax.conv_general_dilated(a, k, (1, 1, 2), "SAME", dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))

    jfe.check(ncdhw, rn(2, 4, 6, 7, 5), rn(6, 2, 3, 2, 3), primitive="conv_general_dilated")
    jfe.check(ndhwc, rn(1, 5, 6, 7, 4), rn(3, 3, 2, 4, 5), primitive="conv_general_dilated")
