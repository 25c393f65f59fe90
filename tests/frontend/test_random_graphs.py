"""Random graphs (tools/random_graphs.py): fixed seeds never give a wrong number, crash or hang, and the
classifier itself catches wrong results (so the harness cannot pass vacuously)."""

import os
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools import random_graphs as rg  # noqa: E402

from pybuda.errors import CompileError  # noqa: E402

#: Seeds covering every op family of the generator (each was WRONG, CRASH or a clean error once:
#: 2/10/26/47 pads with a value or reflect/replicate, 122 softmax over fully masked rows, 39/42 fallback
#: stages with comparisons), plus a plain range.
SEEDS = sorted(set(range(0, 16)) | {26, 39, 42, 47, 80, 122, 149, 195, 405})  # 405: concat join padding


@pytest.fixture(autouse=True)
def _reset():
    yield
    import pybuda

    pybuda.pybuda_reset()


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_is_not_wrong_crash_or_hang(seed):
    res = rg.classify(rg.generate(seed))
    assert res.outcome not in rg.BAD, f"seed {seed}: {res.outcome}: {res.detail}"


def test_generator_is_deterministic_and_varied():
    a, b = rg.generate(7), rg.generate(7)
    assert a.source() == b.source() and a.input_shapes() == b.input_shapes()
    ops = set()
    for seed in range(60):
        m = rg.generate(seed)
        assert 3 <= len(m.ops) <= 13
        ops |= {o.split("_")[0] for o in m.ops}
    assert {"linear", "conv2d", "softmax", "reduce", "slice", "cat", "pad", "sdpa", "binary"} <= ops


def _model():
    return rg.generate(5)


def test_classifier_catches_wrong_numbers():
    def off_by_a_bit(module, inputs):
        with torch.no_grad():
            out = module(*inputs)
        out = list(out) if isinstance(out, tuple) else [out]
        return [o + 0.1 * o.abs().max() for o in out], None

    res = rg.classify(_model(), runner=off_by_a_bit)
    assert res.outcome == "WRONG", res


def test_classifier_catches_wrong_shapes_and_nans():
    def reshaped(module, inputs):
        with torch.no_grad():
            out = module(*inputs)
        out = list(out) if isinstance(out, tuple) else [out]
        return [o.reshape(-1) for o in out], None

    assert rg.classify(_model(), runner=reshaped).outcome == "WRONG"

    def nan(module, inputs):
        with torch.no_grad():
            out = module(*inputs)
        out = list(out) if isinstance(out, tuple) else [out]
        out[0] = out[0].clone()
        out[0].reshape(-1)[0] = float("nan")
        return out, None

    assert rg.classify(_model(), runner=nan).outcome == "WRONG"


def test_classifier_accepts_torch_itself_and_sorts_exceptions():
    def exact(module, inputs):
        with torch.no_grad():
            out = module(*inputs)
        return (list(out) if isinstance(out, tuple) else [out]), None

    assert rg.classify(_model(), runner=exact).outcome == "PASS"

    def clean(module, inputs):
        raise CompileError("no device form", op="pad")

    def crash(module, inputs):
        raise IndexError("list index out of range")

    assert rg.classify(_model(), runner=clean).outcome == "ERROR"
    assert rg.classify(_model(), runner=crash).outcome == "CRASH"


def test_watchdog_reports_a_hang():
    w = rg.Worker()
    try:
        res = w.run(0, timeout=0.01)  # the worker cannot even import torch in 10 ms
    finally:
        w.close()
    assert res.outcome == "HANG"


#: ``--batch-mix`` seeds whose convolutions and pools hold the whole microbatch on dim 0 (the batch is in the
#: graph because another op mixes the samples): once a lowering CompileError, now split per image.
BATCH_MIX_CONV_SEEDS = [38, 71]


@pytest.mark.slow
@pytest.mark.parametrize("seed", BATCH_MIX_CONV_SEEDS)
def test_batch_mix_seed_with_convs_on_the_batch_runs(seed):
    model = rg.generate(seed, batch_mix=True)
    assert any(o.startswith("batch_") for o in model.ops)
    assert any(o.startswith(("conv2d", "max_pool2d", "avg_pool2d")) for o in model.ops)
    res = rg.classify(model)
    assert res.outcome in ("PASS", "FALLBACK", "NUMERICS"), f"seed {seed}: {res.outcome}: {res.detail}"


def test_unstable_elements_are_the_ties_of_torchs_own_result():
    class SoftmaxMeanIsAQuarter(torch.nn.Module):  # mathematically always 0.25: every element is a tie
        def forward(self, x):
            return torch.ne(torch.softmax(x, dim=1).mean(dim=1), 0.25).to(torch.float32), (x > 0.0).float()

    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0))
    module = SoftmaxMeanIsAQuarter()
    with torch.no_grad():
        want = list(module(x))
    comparisons = (torch.ne, torch.Tensor.__gt__)
    ties, clear = rg.unstable_elements(module, [x], want)
    assert (torch.ne, torch.Tensor.__gt__) == comparisons  # the comparisons are torch's own again
    assert bool(ties.all()) and not bool(clear.any())  # x > 0 on random data is never a tie
    flipped = [1.0 - want[0], want[1]]
    assert rg.compare(flipped, want) is not None
    assert rg.compare(flipped, want, [ties, clear]) is None
    assert rg.compare([flipped[0], 1.0 - want[1]], want, [ties, clear]) is not None


def test_worker_keeps_the_arch_and_formats_of_its_parent(monkeypatch):
    """A worker is started without --arch/--defaults: it must not put the default arch back into the
    environment (a ``--arch grayskull`` sweep ran every seed on Wormhole B0)."""
    monkeypatch.setenv("RANDOM_GRAPHS_ARCH", "grayskull")
    monkeypatch.setenv("RANDOM_GRAPHS_DEFAULTS", "1")
    monkeypatch.setattr(rg, "_worker_main", lambda: None)
    monkeypatch.setattr(rg, "ATOL_REL", rg.ATOL_REL)
    monkeypatch.setattr(rg, "PCC_MIN", rg.PCC_MIN)
    assert rg.main(["--worker"]) == 0
    assert os.environ["RANDOM_GRAPHS_ARCH"] == "grayskull"
    assert (rg.ATOL_REL, rg.PCC_MIN) == (rg.DEFAULTS_ATOL_REL, rg.DEFAULTS_PCC)
