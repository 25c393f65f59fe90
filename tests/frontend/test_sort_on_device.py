"""The ordering ops run on the device (pybuda/frontend/aten_sort.py): ``topk`` for small k (k rounds of max,
argmax and a -inf mask), ``sort``/``argsort``/``kthvalue``/``median`` of short dims (ranks counted by comparisons,
a permutation matrix), and ``gather`` at run-time indices proven in range (theirs, or pushed ones the host
checks) is a batched one-hot matmul: a MoE router's top-2 experts, a point cloud's k nearest neighbours and
MAE's random masking run without the CPU."""

import pytest
import torch

import pybuda
from pybuda.errors import InputError
from pybuda.frontend.torch import capture


#: The golden chip's exp and log (log_softmax) at Float32 are within this relative error; the gather adds none.
SFPU_RTOL = 1e-3
#: A loss adds a few such log-probabilities (each within SFPU_RTOL, not all of one sign).
LOSS_RTOL = 3 * SFPU_RTOL


def _no_fallback(module, *inputs):
    result = capture(module, inputs, for_device=True)
    assert not result.report.has_fallback, str(result.report)
    return result


def _exactly_on_the_device(module, *inputs):
    """Every output of ``module`` computed wholly on the device equals torch's, element for element."""
    for got, want in zip(_no_fallback(module, *inputs).run(*inputs), module(*inputs)):
        assert torch.equal(got.to(want.dtype), want)


def _on_a_float32_device(name, module, *inputs):
    """``module`` (checked to need no CPU fallback) on a golden Wormhole TTDevice at Float32/HiFi4; returns a function
    that runs one push of inputs and gives its first output."""
    _no_fallback(module, *inputs)
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     default_math_fidelity=pybuda.MathFidelity.HiFi4)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule(name, module), arch=pybuda.BackendDevice.Wormhole_B0)
    return lambda *xs: pybuda.run_inference(inputs=[xs]).get(timeout=300)[0].value()


class TopK(torch.nn.Module):
    def forward(self, x):  # [2, 5, 40]
        big = x.topk(4, dim=-1)
        small = torch.topk(x, 3, dim=1, largest=False)
        return big.values, big.indices, small.values, small.indices, x.topk(1).indices


def test_topk_values_and_indices_match_torch(fe):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 40)
    result = _no_fallback(TopK().eval(), x)
    got, want = result.run(x), TopK()(x)
    for g, w in zip(got, want):
        if w.is_floating_point():
            assert torch.allclose(g, w, atol=1e-6)
        else:
            assert torch.equal(g.long(), w)


def test_tied_values_come_in_ascending_index_order(fe):
    x = torch.tensor([[0.0, 2.0, 0.0, 2.0, 1.0, 2.0, 0.0, 0.0]])
    result = _no_fallback(_Tied().eval(), x)
    values, indices = result.run(x)
    assert torch.equal(values, torch.tensor([[2.0, 2.0, 2.0, 1.0, 0.0]]))
    assert torch.equal(indices.long(), torch.tensor([[1, 3, 5, 4, 0]]))


class _Tied(torch.nn.Module):
    def forward(self, x):
        return x.topk(5, dim=-1)


def test_a_large_k_runs_on_the_cpu_with_a_reason():
    class Big(torch.nn.Module):
        def forward(self, x):
            return x.topk(20, dim=-1).values * 2.0

    x = torch.randn(2, 64)
    result = capture(Big().eval(), (x,), for_device=True)
    assert "topk with k = 20" in str(result.report)
    assert torch.allclose(result.run(x)[0], Big()(x))


class MoE(torch.nn.Module):
    def __init__(self, d=16, experts=4):
        super().__init__()
        self.gate = torch.nn.Linear(d, experts)
        self.experts = torch.nn.ModuleList([torch.nn.Linear(d, d) for _ in range(experts)])

    def forward(self, x):
        weights, chosen = self.gate(x).softmax(-1).topk(2, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        outs = torch.stack([e(x) for e in self.experts], dim=-2)  # [b, seq, experts, d]
        picked = torch.gather(outs, 2, chosen[..., None].expand(-1, -1, -1, x.shape[-1]))
        return (picked * weights[..., None]).sum(2)


class KNearest(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))

    def forward(self, points):  # [b, n, 3]
        b, n, _ = points.shape
        near = torch.cdist(points, points).topk(4, dim=-1, largest=False).indices
        neighbours = torch.gather(points[:, None].expand(b, n, n, 3), 2, near[..., None].expand(-1, -1, -1, 3))
        return self.mlp(torch.cat([neighbours - points[:, :, None], neighbours], -1)).max(2).values


@pytest.mark.parametrize("model,shape", [(MoE, (2, 6, 16)), (KNearest, (2, 12, 3))], ids=["moe", "knn"])
def test_routing_by_topk_runs_on_the_device(model, shape, fe):
    torch.manual_seed(0)
    module = model().eval()
    x = torch.randn(*shape)
    result = _no_fallback(module, x)
    fe.matches(result.run(x), [module(x)], atol=1e-5)


class PickLabel(torch.nn.Module):
    def forward(self, logits, labels):  # labels [b] pushed with the logits
        return logits.log_softmax(-1).gather(1, labels[:, None])[:, 0]


def test_gather_at_pushed_labels_runs_on_the_device_and_refuses_bad_labels():
    logits, labels = torch.randn(4, 10), torch.tensor([3, 0, 9, 5])
    module = PickLabel().eval()
    result = _no_fallback(module, logits, labels)
    assert torch.allclose(result.run(logits, labels)[0], module(logits, labels), atol=1e-5)

    run = _on_a_float32_device("pick", module, logits, labels)
    assert torch.allclose(run(logits, labels), module(logits, labels), rtol=SFPU_RTOL, atol=0)
    with pytest.raises(InputError, match="indices"):
        run(logits, torch.tensor([3, 0, 10, 5]))


class TableAtArgmax(torch.nn.Module):
    def forward(self, x):  # a table the forward builds, read at a computed index: a one-hot matmul
        return (torch.linspace(-1, 1, 37 * 8).reshape(37, 8)[x.argmax(-1)],)


def test_a_constant_table_at_a_run_time_index_runs_on_the_device():
    x = torch.randn(5, 37)
    _exactly_on_the_device(TableAtArgmax().eval(), x)


class CrossEntropy(torch.nn.Module):
    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, logits, labels):
        return torch.nn.functional.cross_entropy(logits, labels, **self.options)


@pytest.mark.parametrize("options", [{}, {"reduction": "none"}, {"reduction": "sum", "label_smoothing": 0.1},
                                     {"ignore_index": 3}], ids=["mean", "none", "sum_smoothed", "ignore_in_range"])
def test_cross_entropy_with_an_ignored_label_runs_on_the_device(options):
    # The loss gathers at where(label != ignore_index, label, 0): proven in range once the host refuses labels that
    # are neither a class nor the ignored value; the ignored value itself is pushed and masked out on the device.
    ignored = options.get("ignore_index", -100)
    torch.manual_seed(0)
    logits, labels = torch.randn(5, 10), torch.tensor([3, ignored, 9, 0, 5])
    module = CrossEntropy(**options).eval()
    run = _on_a_float32_device("ce", module, logits, labels)
    assert torch.allclose(run(logits, labels), module(logits, labels), rtol=LOSS_RTOL, atol=1e-6)
    message = "masks out" if ignored < 0 else "indices"
    for bad in (10, -1):
        with pytest.raises(InputError, match=message):
            run(logits, torch.tensor([3, ignored, bad, 0, 5]))


class ShiftedLMLoss(torch.nn.Module):
    """A causal language model's loss: token t's logits predict label t + 1, -100 labels ignored."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(16, 12)

    def forward(self, hidden, labels):
        logits = self.head(hidden)[..., :-1, :]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 12), labels[..., 1:].reshape(-1))


def test_a_shifted_language_model_loss_runs_on_the_device_and_checks_the_labels_it_reads():
    torch.manual_seed(0)
    module = ShiftedLMLoss().eval()
    hidden, labels = torch.randn(2, 6, 16), torch.randint(0, 12, (2, 6))
    labels[0, 3] = labels[1, 1] = -100
    run = _on_a_float32_device("lm", module, hidden, labels)
    got = run(hidden, labels)
    assert torch.allclose(got, module(hidden, labels), rtol=LOSS_RTOL, atol=1e-6)
    unread = labels.clone()
    unread[1, 0] = 55  # the first label predicts nothing: torch never reads it either
    assert torch.allclose(run(hidden, unread), got)
    bad = labels.clone()
    bad[1, 2] = 55
    with pytest.raises(InputError, match=r"\[1:6\] along dim 1 .*masks out"):
        run(hidden, bad)


class Sort(torch.nn.Module):
    def __init__(self, dim, descending):
        super().__init__()
        self.dim, self.descending = dim, descending

    def forward(self, x):
        return torch.sort(x, dim=self.dim, descending=self.descending)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_sort_matches_torchs_stable_sort(dim, descending, ties):
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-3, 4, (3, 7, 5), generator=g).float() if ties else torch.randn(3, 7, 5, generator=g)
    module = Sort(dim, descending).eval()
    values, indices = _no_fallback(module, x).run(x)
    want = torch.sort(x, dim=dim, descending=descending, stable=True)
    assert torch.equal(values, want.values) and torch.equal(indices.long(), want.indices)


class Selections(torch.nn.Module):
    def forward(self, x):  # [4, 9]
        kth = torch.kthvalue(x, 3, dim=1)
        middle = torch.median(x, dim=0, keepdim=True)
        return kth.values, kth.indices, middle.values, middle.indices, torch.median(x), torch.argsort(x, dim=1)


def test_kthvalue_median_and_argsort_match_torch():
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(4))
    _exactly_on_the_device(Selections().eval(), x)


def test_a_long_sort_runs_on_the_cpu_with_a_reason():
    x = torch.randn(2, 300)
    result = capture(Sort(-1, False).eval(), (x,), for_device=True)
    assert "sort of 300 values" in str(result.report)
    assert all(torch.equal(g.to(w.dtype), w) for g, w in zip(result.run(x), Sort(-1, False)(x)))


class RandomMasking(torch.nn.Module):
    """MAE's per-sample random masking: keep the patches of the lowest noise, restore the order for the mask."""

    def forward(self, patches, noise):  # [b, L, d], [b, L]
        b, length, d = patches.shape
        keep = length // 4
        shuffle = torch.argsort(noise, dim=1)
        restore = torch.argsort(shuffle, dim=1)
        kept = torch.gather(patches, 1, shuffle[:, :keep, None].expand(-1, -1, d))
        mask = torch.ones(b, length)
        mask[:, :keep] = 0
        return kept, torch.gather(mask, 1, restore)


def test_mae_random_masking_runs_on_the_device(fe):
    g = torch.Generator().manual_seed(5)
    patches, noise = torch.randn(2, 16, 8, generator=g), torch.rand(2, 16, generator=g)
    module = RandomMasking().eval()
    result = _no_fallback(module, patches, noise)
    fe.matches(result.run(patches, noise), list(module(patches, noise)), atol=0)


class Running(torch.nn.Module):
    def forward(self, x):  # [3, 7]
        high, low = torch.cummax(x, dim=1), torch.cummin(x, dim=0)
        return high.values, high.indices, low.values, low.indices


class RunningLogSumExp(torch.nn.Module):
    def forward(self, x):  # [3, 7]
        return torch.logcumsumexp(x * 20.0, dim=1), torch.logcumsumexp(x, dim=0)  # large values: stably


def test_logcumsumexp_matches_torch(fe):
    x = torch.randn(3, 7, generator=torch.Generator().manual_seed(8))
    module = RunningLogSumExp().eval()
    fe.matches(_no_fallback(module, x).run(x), list(module(x)), atol=1e-5)


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_running_max_and_min_match_torch(ties):
    g = torch.Generator().manual_seed(6)
    x = torch.randint(-2, 3, (3, 7), generator=g).float() if ties else torch.randn(3, 7, generator=g)
    _exactly_on_the_device(Running().eval(), x)


class Wraps(torch.nn.Module):
    def forward(self, x):  # [4, 9]
        shifted = (x.argmax(-1) - 3) % 9  # argmax in [0, 8]: one wrap at most
        return torch.take_along_dim(x, x.argsort(-1)[:, :3], -1), shifted, torch.fmod(x.argmin(-1), 9)


def test_remainders_of_indices_proven_in_range_run_on_the_device():
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(7))
    _exactly_on_the_device(Wraps().eval(), x)


class FlatIndexSplit(torch.nn.Module):
    """A top-k over a flattened [rows, width] score map split back into row and column (CenterNet's peaks, a beam
    search's beam and token), then the winners' rows gathered by the column index."""

    def forward(self, x):  # [2, 3, 7]
        scores, idx = x.flatten(1).topk(4)  # idx in [0, 20]
        row, col = torch.div(idx, 7, rounding_mode="floor"), idx % 7
        shifted = x.argmax(-1) - 5  # in [-5, 1]: quotients and remainders of both signs
        negative = x.argmin(-1) - 6  # in [-6, 0]
        picked = torch.gather(x[:, 0], 1, col)  # col proven within [0, 6]
        return (scores, row, col, idx // 3, torch.div(idx, 6, rounding_mode="trunc"), shifted // 2, shifted % 3,
                torch.div(negative, 4, rounding_mode="trunc"), torch.fmod(negative, 4), picked)


def test_integer_division_and_remainders_of_indices_run_on_the_device():
    x = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(9))
    _exactly_on_the_device(FlatIndexSplit().eval(), x)


def test_a_division_with_a_rounding_mode_of_float_data_runs_on_the_cpu_with_a_reason():
    class FloorOfFloats(torch.nn.Module):
        def forward(self, x):
            return torch.div(x, 0.3, rounding_mode="floor")

    x = torch.randn(2, 5)
    result = capture(FloorOfFloats().eval(), (x,), for_device=True)
    assert "other than of integers by a positive constant" in str(result.report)
    assert torch.equal(result.run(x)[0], torch.div(x, 0.3, rounding_mode="floor"))


def test_an_unproven_remainder_runs_on_the_cpu_with_a_reason():
    class Mod(torch.nn.Module):
        def forward(self, i):
            return i % 5

    i = torch.tensor([[7, -3, 12]])
    result = capture(Mod().eval(), (i,), for_device=True)
    assert "integer division by 5 with 6710888 possible quotients" in str(result.report)
    assert torch.equal(result.run(i)[0], i % 5)
