"""Whole models exported from torch to ONNX: a small CNN and BERT (random weights) vs ONNX Runtime."""

import io

import numpy as np
import pytest
import torch

from onnx_helpers import ort_run
import pybuda
from pybuda.errors import InputError
from pybuda.frontend.onnx.backend import PybudaBackend
from pybuda.verify import calculate_pcc

PCC_MIN = 0.99
ATOL = 1e-3


def _export(module, args, names):
    buf = io.BytesIO()
    torch.onnx.export(module.eval(), args, buf, input_names=names, opset_version=17, dynamo=False)
    import onnx

    return onnx.load_from_string(buf.getvalue())


def _check(got, want):
    for g, w in zip(got, want):
        g, w = torch.as_tensor(np.asarray(g)), torch.as_tensor(np.asarray(w))
        assert g.shape == w.shape
        assert calculate_pcc(g.float(), w.float()) >= PCC_MIN
        assert torch.allclose(g.float(), w.float(), atol=ATOL, rtol=1e-3)


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        x = torch.relu(self.c2(x))
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return torch.softmax(self.fc(x), -1)


def test_small_cnn_on_golden_device():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    model = _export(SmallCNN(), (x,), ["x"])
    rep = PybudaBackend.prepare(model)
    got = rep.run([x.numpy()])
    assert not rep.report.has_fallback, str(rep.report)
    _check(got, ort_run(model, [x.numpy()]))


def test_small_cnn_on_a_ttdevice():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    model = _export(SmallCNN(), (x,), ["x"])
    mod = pybuda.OnnxModule("cnn", model)
    out = pybuda.run_inference(mod, inputs=[(x,)]).get()
    _check([out[0].value().numpy()], ort_run(model, [x.numpy()]))


def test_a_model_exported_with_a_static_batch_runs_on_a_ttdevice():
    # Exported with batch 2: a push of 2 samples is one run of the model. The device used to take one sample of
    # it, which the model refused ("dim 0 is 2, got a sample of shape [1, 8]", a shape the user never pushed).
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16, 16)
    model = _export(SmallCNN(), (x,), ["x"])
    got = pybuda.run_inference(pybuda.OnnxModule("cnn_b2", model), inputs=[(x,)]).get()[0].value()
    want = torch.as_tensor(ort_run(model, [x.numpy()])[0])
    assert got.shape == want.shape and calculate_pcc(got, want) >= PCC_MIN
    assert torch.allclose(got, want, atol=3e-3)  # default formats, as test_small_cnn_on_a_ttdevice (1e-3 there)
    pybuda.shutdown()
    with pytest.raises(InputError, match=r"dim 0 is 2, got a sample of shape \[4, 3, 16, 16\]"):
        pybuda.run_inference(pybuda.OnnxModule("cnn_b2", model), inputs=[(torch.randn(4, 3, 16, 16),)]).get()


def _bert(layers: int, hidden: int, heads: int, inter: int):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                                  intermediate_size=inter, vocab_size=1000, max_position_embeddings=128)
    torch.manual_seed(0)
    return transformers.BertModel(cfg, add_pooling_layer=False).eval()


class _Hidden(torch.nn.Module):
    """BERT returning its last hidden state (a plain tensor for the exporter)."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, ids):
        return self.bert(input_ids=ids).last_hidden_state


def _run_bert(layers, hidden, heads, inter, seq):
    bert = _bert(layers, hidden, heads, inter)
    ids = torch.randint(0, 1000, (1, seq))
    model = _export(_Hidden(bert), (ids,), ["input_ids"])
    rep = PybudaBackend.prepare(model)
    got = rep.run([ids.numpy()])
    _check(got[:1], ort_run(model, [ids.numpy()])[:1])
    return rep


def test_bert_two_layers_from_torch_onnx_export():
    rep = _run_bert(2, 64, 4, 128, 16)
    assert rep.report.device_ops > 0 and rep.report.host_fraction < 0.25, str(rep.report)


@pytest.mark.slow
def test_bert_base_from_torch_onnx_export():
    rep = _run_bert(12, 768, 12, 3072, 128)
    assert rep.report.host_fraction < 0.1, str(rep.report)
