"""Ribbon places a sparse matmul and its dense partner in one epoch, as TT-Buda's Ribbon did
(policy_utils ``place_sparse_dense_pair``): a convolution's im2col output (kh*kw times its activation) never
crosses an epoch boundary through a DRAM queue."""

from types import SimpleNamespace

import torch
from torch import nn

import pybuda
from pybuda.balancer.policies import sparse_dense_partner
from pybuda.compile import pybuda_compile
from pybuda.config import CompilerConfig
from pybuda.dtypes import DataFormat, MathFidelity


def _op(name, type_="matmul", identity=False):
    return SimpleNamespace(name=name, type=type_, attrs={"identity": True} if identity else {})


def test_partner_is_the_same_convolutions_dense_matmul_and_only_consumer():
    ops = [_op("conv2d_7.folded.im2col", identity=True), _op("conv2d_7.folded"), _op("relu_7", "relu")]
    assert sparse_dense_partner(ops, [[(1, 0)], [(2, 0)], []], 0) == 1
    assert sparse_dense_partner(ops, [[(1, 0)], [(2, 0)], []], 1) is None  # a dense matmul pairs with nothing
    # the sparse output read by another op too, or a dense matmul of another convolution: no pair
    assert sparse_dense_partner(ops, [[(1, 0), (2, 1)], [(2, 0)], []], 0) is None
    other = [_op("conv2d_7.folded.im2col", identity=True), _op("conv2d_8.folded")]
    assert sparse_dense_partner(other, [[(1, 0)], []], 0) is None
    # a max-pool's im2col feeds its reduce: a pair too (TT-Buda paired dense matmuls and reduces)
    pool = [_op("max_pool2d.im2col", identity=True), _op("max_pool2d", "reduce")]
    assert sparse_dense_partner(pool, [[(1, 0)], []], 0) == 1


def test_ribbon_never_cuts_an_epoch_between_an_im2col_and_its_weights():
    torch.manual_seed(0)
    layers = []
    for _ in range(5):  # VoVNet's first one-shot-aggregation stage: its 3x3 convolutions at 56x56x128
        layers += [nn.Conv2d(128, 128, 3, padding=1), nn.ReLU()]
    model = nn.Sequential(*layers).eval()
    x = torch.randn(1, 128, 56, 56)
    # (before the pairing, two of the five im2cols ended an epoch and their weight matmuls began the next)
    cfg = CompilerConfig(default_df_override=DataFormat.Float16_b, default_math_fidelity=MathFidelity.HiFi3,
                         device_config="gs_e150", balancer_policy="Ribbon")
    results = pybuda_compile(pybuda.PyTorchModule("convs", model), "convs", x, compiler_cfg=cfg,
                             microbatch_size=64)
    placement = results.placer_solution
    epoch_of = {name: e for e in range(len(placement.epochs)) for name in placement.ops_in_epoch(e)}
    assert len(placement.epochs) > 1
    pairs = [(name, name.rsplit(".im2col", 1)[0]) for name in epoch_of if name.endswith(".im2col")]
    assert pairs
    for sparse, dense in pairs:
        assert epoch_of[sparse] == epoch_of[dense], (sparse, dense)
