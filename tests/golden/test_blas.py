"""The golden's float32 products (pybuda.golden.blas): torch.matmul's results and special values, a row's
bits independent of the rows beside it, and the plain torch.matmul where oneDNN does not apply."""

import pytest
import torch

from pybuda.golden import blas


@pytest.fixture
def without_onednn(monkeypatch):
    monkeypatch.setattr(blas, "_available", False)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("x_shape,w_shape", [((128, 768), (768, 512)), ((2, 3, 64, 96), (96, 64)),
                                             ((4, 64, 256), (1, 1, 256, 32)), ((0, 64), (64, 64))])
def test_matches_torch_matmul(x_shape, w_shape):
    x, w = torch.randn(x_shape, generator=_gen(1)), torch.randn(w_shape, generator=_gen(2))
    out = blas.matmul(x, w)
    ref = torch.matmul(x, w)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-4)


def test_a_transposed_weight_is_read_in_place():
    w = torch.randn(512, 256, generator=_gen(3)).t()  # [256, 512] with stride (1, 256), as nn.Linear stores it
    x = torch.randn(64, 256, generator=_gen(4))
    torch.testing.assert_close(blas.matmul(x, w), x @ w, rtol=1e-5, atol=1e-4)


def test_a_rows_result_does_not_depend_on_the_rows_beside_it():
    """A sample gets the same bits alone and in a microbatch (the golden batches a microbatch's inputs)."""
    x, w = torch.randn(1024, 768, generator=_gen(5)), torch.randn(768, 1024, generator=_gen(6))
    whole = blas.matmul(x, w)
    assert torch.equal(whole[:1], blas.matmul(x[:1], w))
    assert torch.equal(whole[128:256], blas.matmul(x[128:256], w))
    assert torch.equal(whole.reshape(8, 128, 1024), blas.matmul(x.reshape(8, 128, 768), w))


def test_special_values_come_out_as_torch_matmuls():
    x, w = torch.randn(64, 64, generator=_gen(7)), torch.randn(64, 64, generator=_gen(8))
    x[0, 0], x[1, 1], x[2, 2] = float("inf"), float("nan"), 1e-40
    w[3, 3] = 1e-41
    out, ref = blas.matmul(x, w), x @ w
    assert torch.equal(out.isnan(), ref.isnan()) and torch.equal(out.isinf(), ref.isinf())
    tiny = torch.full((32, 32), 1e-39)  # subnormal: kept, not flushed to zero
    assert torch.equal(blas.matmul(tiny, torch.eye(32)), tiny @ torch.eye(32))


@pytest.mark.parametrize("x,w", [
    (torch.ones(4, 32, dtype=torch.float64), torch.ones(32, 32, dtype=torch.float64)),  # not float32
    (torch.ones(2, 4, 32), torch.ones(2, 32, 32)),  # a batch of matrices, not one
    (torch.ones(4, 8), torch.ones(8, 8)),  # too small to pay for the call
    (torch.ones(32), torch.ones(32, 32)),  # a vector
])
def test_other_products_are_torch_matmul(x, w):
    assert torch.equal(blas.matmul(x, w), torch.matmul(x, w))


def test_without_onednn_every_product_is_torch_matmul(without_onednn):
    x, w = torch.randn(128, 768, generator=_gen(9)), torch.randn(768, 512, generator=_gen(10))
    assert not blas.available()
    assert torch.equal(blas.matmul(x, w), torch.matmul(x, w))
