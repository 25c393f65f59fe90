"""Whole models trained with run_training for 50 steps on the simulated chip, each against the same loop in
torch: an MLP, a small CNN and BERT-tiny, as PyBuda modules and as PyTorch modules.

At Float32 the loss curve stays within 2 % of torch's; at Float16_b/HiFi3 and Bfp8_b/LoFi it still goes
down. The chip's Float32 matmul multiplies in TF32, so curves differ slightly from torch's.
"""

import copy
import queue

import pytest
import torch

import pybuda
from pybuda.runtime import training

STEPS = 50
#: Float32 loss curves: relative difference per step against torch (the issue's 2 %).
LOSS_RTOL = 0.02
WORMHOLE = pybuda.BackendDevice.Wormhole_B0


def formats(df, fidelity):
    pybuda.set_configuration_options(default_df_override=df, math_fidelity=fidelity,
                                     accumulate_df=pybuda.DataFormat.Float32 if df == pybuda.DataFormat.Float32
                                     else pybuda.DataFormat.Float16_b)


def train_on_chip(module, data, loss, optimizer, df=pybuda.DataFormat.Float32, fidelity=pybuda.MathFidelity.HiFi4):
    """Train ``module`` on a TTDevice for len(data) steps; ``loss`` is a pybuda loss (on the device) or a torch
    loss (on a CPUDevice after it). Returns the per-step losses and the device's program placements."""
    formats(df, fidelity)
    tt0 = pybuda.TTDevice("tt0", module=module, optimizer=optimizer, arch=WORMHOLE,
                          fp32_fallback=pybuda.DataFormat.Float32 if df == pybuda.DataFormat.Float32 else df)
    if isinstance(loss, torch.nn.Module):
        last = pybuda.CPUDevice("cpu_loss")
        last.place_loss_module(pybuda.PyTorchModule("loss", loss))
    else:
        last = tt0
        tt0.place_loss_module(loss)
    for x, y in data:
        tt0.push_to_inputs(x)
        last.push_to_target_inputs(y)
    losses = queue.Queue()
    pybuda.run_training(steps=len(data), loss_queue=losses)
    report = training.current().trainer_of(tt0).report
    return [float(losses.get()[0].value().sum()) for _ in data], report


def train_in_torch(model, data, loss_fn, lr):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    curve = []
    for x, y in data:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        curve.append(float(loss.detach()))
    return curve


def assert_follows(got, want):
    assert len(got) == len(want)
    for step, (g, w) in enumerate(zip(got, want)):
        assert g == pytest.approx(w, rel=LOSS_RTOL), f"step {step}: chip {g}, torch {w}"


def assert_decreasing(curve):
    window = max(1, len(curve) // 5)
    first, last = sum(curve[:window]) / window, sum(curve[-window:]) / window
    assert last < 0.8 * first, f"loss went from {first} to {last}"


def regression_data(shape_in, make_target, steps=STEPS, mb=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn((mb,) + tuple(shape_in), generator=g) for _ in range(steps)]
    return [(x, make_target(x)) for x in xs]


# --- MLP -------------------------------------------------------------------------------------------------


class TorchMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(24, 48)
        self.fc2 = torch.nn.Linear(48, 12)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


_MLP_MAP = torch.randn(24, 12, generator=torch.Generator().manual_seed(7)) * 0.3


def _mlp_target(x):
    return torch.tanh(x @ _MLP_MAP)


@pytest.mark.slow
def test_pytorch_mlp_follows_torch_for_50_steps():
    model = TorchMLP()
    data = regression_data((3, 24), _mlp_target)
    want = train_in_torch(copy.deepcopy(model), data, torch.nn.MSELoss(), lr=0.1)
    got, report = train_on_chip(pybuda.PyTorchModule("mlp", model), data, torch.nn.MSELoss(),
                                pybuda.optimizers.SGD(learning_rate=0.1))
    assert all(line.endswith(": device") for line in report), report
    assert_follows(got, want)
    assert_decreasing(got)


@pytest.mark.slow
@pytest.mark.parametrize("df, fidelity", [(pybuda.DataFormat.Float16_b, pybuda.MathFidelity.HiFi3),
                                          (pybuda.DataFormat.Bfp8_b, pybuda.MathFidelity.LoFi)])
def test_pytorch_mlp_still_learns_at_low_precision(df, fidelity):
    data = regression_data((3, 24), _mlp_target)
    got, _ = train_on_chip(pybuda.PyTorchModule("mlp", TorchMLP()), data, torch.nn.MSELoss(),
                           pybuda.optimizers.SGD(learning_rate=0.1), df=df, fidelity=fidelity)
    assert_decreasing(got)


# --- CNN -------------------------------------------------------------------------------------------------


class TorchCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x):
        h = torch.relu(self.conv1(x))
        h = torch.relu(self.conv2(h))
        return self.fc(h.mean(dim=(2, 3)))


def _cnn_target(x):
    return torch.stack([x[:, c].mean(dim=(1, 2)) for c in range(3)] + [x.mean(dim=(1, 2, 3))] * 2, dim=1)


@pytest.mark.slow
def test_pytorch_cnn_follows_torch_for_50_steps():
    model = TorchCNN()
    data = regression_data((3, 12, 12), _cnn_target, mb=1)
    want = train_in_torch(copy.deepcopy(model), data, torch.nn.MSELoss(), lr=0.2)
    got, report = train_on_chip(pybuda.PyTorchModule("cnn", model), data, torch.nn.MSELoss(),
                                pybuda.optimizers.SGD(learning_rate=0.2))
    print("CNN programs:", report)
    assert_follows(got, want)
    assert_decreasing(got)


# --- BERT-tiny ----------------------------------------------------------------------------------------------


def bert_tiny_encoder(seq=32):
    transformers = pytest.importorskip("transformers")
    from pybuda.models.bert import BertEncoderWrapper

    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=2,
                                     intermediate_size=512, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    return BertEncoderWrapper(transformers.models.bert.modeling_bert.BertEncoder(config))


def _bert_target(x):
    return torch.tanh(x.roll(1, dims=-1))


@pytest.mark.slow
def test_pytorch_bert_tiny_follows_torch_for_50_steps():
    model = bert_tiny_encoder()
    data = regression_data((32, 128), _bert_target, mb=1)
    want = train_in_torch(copy.deepcopy(model), data, torch.nn.MSELoss(), lr=0.5)
    got, report = train_on_chip(pybuda.PyTorchModule("bert", model), data, torch.nn.MSELoss(),
                                pybuda.optimizers.SGD(learning_rate=0.5))
    assert all(line.endswith(": device") for line in report), report
    assert_follows(got, want)
    assert_decreasing(got)


class PybudaBertLayer(pybuda.PyBudaModule):
    """One BERT encoder layer written with pybuda ops (hidden 128, 2 heads of 64, FFN 512)."""

    def __init__(self, name, hidden=128, heads=2, ffn=512, seed=0):
        super().__init__(name)
        g = torch.Generator().manual_seed(seed)
        self.heads, self.hidden = heads, hidden

        def w(*shape):
            return pybuda.Parameter(torch.randn(*shape, generator=g) * 0.05, requires_grad=True)

        self.wq, self.wk, self.wv, self.wo = w(hidden, hidden), w(hidden, hidden), w(hidden, hidden), w(hidden, hidden)
        self.w1, self.w2 = w(hidden, ffn), w(ffn, hidden)
        self.ln1_w = pybuda.Parameter(torch.ones(hidden), requires_grad=True)
        self.ln1_b = pybuda.Parameter(torch.zeros(hidden), requires_grad=True)
        self.ln2_w = pybuda.Parameter(torch.ones(hidden), requires_grad=True)
        self.ln2_b = pybuda.Parameter(torch.zeros(hidden), requires_grad=True)

    def _heads(self, name, x, seq):
        d = self.hidden // self.heads
        x = pybuda.op.Reshape(f"{name}.split", x, (1, seq, self.heads, d))
        return pybuda.op.Transpose(f"{name}.heads", x, 1, 2)

    def forward(self, x):
        op = pybuda.op
        seq = x.shape[-2]
        q = self._heads("q", op.Matmul("q", x, self.wq), seq)
        k = self._heads("k", op.Matmul("k", x, self.wk), seq)
        v = self._heads("v", op.Matmul("v", x, self.wv), seq)
        scores = op.Multiply("scale", op.Matmul("qk", q, op.Transpose("kt", k, 2, 3)),
                             op.Constant("inv_sqrt_d", constant=(self.hidden // self.heads) ** -0.5))
        ctx = op.Matmul("ctx", op.Softmax("probs", scores, dim=-1), v)
        ctx = op.Reshape("merge", op.Transpose("ctx_t", ctx, 1, 2), (1, seq, self.hidden))
        h = op.Layernorm("ln1", op.Add("res1", x, op.Matmul("o", ctx, self.wo)), self.ln1_w, self.ln1_b)
        f = op.Matmul("ffn2", op.Gelu("gelu", op.Matmul("ffn1", h, self.w1)), self.w2)
        return op.Layernorm("ln2", op.Add("res2", h, f), self.ln2_w, self.ln2_b)


def torch_bert_layer(p, x, name="bert", heads=2):
    def P(k):
        return p[f"{name}.{k}"]

    b, seq, hidden = x.shape
    d = hidden // heads

    def split(t):
        return t.reshape(b, seq, heads, d).transpose(1, 2)

    q, k, v = split(x @ P("wq")), split(x @ P("wk")), split(x @ P("wv"))
    ctx = torch.softmax(q @ k.transpose(2, 3) * d ** -0.5, dim=-1) @ v
    ctx = ctx.transpose(1, 2).reshape(b, seq, hidden)
    h = torch.nn.functional.layer_norm(x + ctx @ P("wo"), (hidden,), P("ln1_w"), P("ln1_b"))
    f = torch.nn.functional.gelu(h @ P("w1")) @ P("w2")
    return torch.nn.functional.layer_norm(h + f, (hidden,), P("ln2_w"), P("ln2_b"))


@pytest.mark.slow
def test_pybuda_bert_layer_follows_torch_for_50_steps():
    module = PybudaBertLayer("bert")
    params = {p.get_name(): p.value().detach().clone().requires_grad_(True) for p in module.get_parameters()}
    data = regression_data((32, 128), _bert_target, mb=1)
    opt = torch.optim.SGD(list(params.values()), lr=0.5)
    want = []
    for x, y in data:
        opt.zero_grad()
        # pybuda.op.loss.MSELoss averages each sample over its last two dims; the microbatch sums.
        loss = ((torch_bert_layer(params, x) - y) ** 2).mean(dim=(-2, -1)).sum()
        loss.backward()
        opt.step()
        want.append(float(loss.detach()))
    got, report = train_on_chip(module, data, pybuda.op.loss.MSELoss("mse"), pybuda.optimizers.SGD(learning_rate=0.5))
    assert all(line.endswith(": device") for line in report), report
    assert_follows(got, want)
    assert_decreasing(got)


@pytest.mark.slow
def test_pybuda_bert_layer_still_learns_at_float16_b():
    data = regression_data((32, 128), _bert_target, mb=1, steps=20)
    got, _ = train_on_chip(PybudaBertLayer("bert"), data, pybuda.op.loss.MSELoss("mse"),
                           pybuda.optimizers.SGD(learning_rate=0.5), df=pybuda.DataFormat.Float16_b,
                           fidelity=pybuda.MathFidelity.HiFi3)
    assert_decreasing(got)
