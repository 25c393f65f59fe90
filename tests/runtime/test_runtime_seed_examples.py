"""The runtime examples of the seed documents, run as written (apart from model downloads)."""

import logging
import queue

import pytest
import torch

import pybuda
from pybuda import TTDevice
from seed_modules import BudaMatmul
from pybuda.runtime import ttdevice

GET_TIMEOUT_S = 30


def test_seed_buda_matmul_with_old_keywords():
    tt0 = TTDevice("grayskull0")  # Create a Tenstorrent device
    lin0 = BudaMatmul("matmul0")  # Instantiate the above model
    tt0.place_module(lin0)  # Place the model on TT device
    act = torch.rand(1, 1, 32, 32)  # Feed some random data to the device
    tt0.push_to_inputs(act)
    # The old documented keywords (tt-buda PR#13) are accepted, with a DeprecationWarning.
    with pytest.warns(DeprecationWarning, match="num_inputs"):
        results = pybuda.run_inference(num_inputs=1, sequential=True)
    outputs = results.get(timeout=GET_TIMEOUT_S)
    assert isinstance(outputs, list) and len(outputs) == 1
    assert isinstance(outputs[0], pybuda.Tensor)
    assert tuple(outputs[0].shape) == (1, 1, 32, 32)
    # The seed never sets the weights: TT-Buda compiled them as zeros, and so do we.
    assert torch.equal(outputs[0].value(), torch.zeros(1, 1, 32, 32))
    assert tt0.arch == pybuda.BackendDevice.Grayskull
    assert tt0.devtype == pybuda.BackendType.Golden


def test_seed_buda_matmul_numerics_and_module_run():
    lin0 = BudaMatmul("matmul0")
    w = torch.randn(1, 1, 32, 32)
    lin0.set_parameter("matmul0.weights", w)
    act = torch.rand(1, 1, 32, 32)
    out = lin0.run(act)  # Module.run: run_inference(self, inputs=[(act,)]).get()
    assert len(out) == 1
    torch.testing.assert_close(out[0].value(), act @ w, rtol=1e-5, atol=1e-5)
    assert [d.name for d in pybuda.runtime.state.user_devices()] == ["auto_tt0"]


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="num_input"):
        pybuda.run_inference(num_input=1)


def test_seed_bert_encoder(caplog, monkeypatch):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(ttdevice, "_silicon_notice_given", False)
    caplog.set_level(logging.WARNING, logger="pybuda")
    torch.manual_seed(0)
    # A small BERT instead of from_pretrained("bert-base-uncased") (no downloads in tests).
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=128, vocab_size=100, max_position_embeddings=64)
    model = transformers.BertModel(config).eval()

    module = pybuda.PyTorchModule("bert_encoder", model.encoder)
    tt0 = pybuda.TTDevice("tt0", module=module, arch=pybuda.BackendDevice.Wormhole_B0,
                          devtype=pybuda.BackendType.Silicon)
    seq_len = 32
    input = torch.randn(1, seq_len, model.config.hidden_size)
    output_queue = pybuda.run_inference(inputs=[input])
    outputs = output_queue.get(timeout=GET_TIMEOUT_S)
    print(outputs)  # what the seed does

    # No silicon here: the device runs as Golden, and says so once.
    assert tt0.devtype == pybuda.BackendType.Golden
    assert tt0.arch == pybuda.BackendDevice.Wormhole_B0
    notices = [r for r in caplog.records if "No Tenstorrent silicon" in r.getMessage()]
    assert len(notices) == 1 and "tt0" in notices[0].getMessage()
    with torch.no_grad():
        golden = model.encoder(input)[0]
    assert tuple(outputs[0].shape) == tuple(golden.shape)
    assert pybuda.verify.calculate_pcc(golden, outputs[0].value()) >= 0.99
    torch.testing.assert_close(outputs[0].value(), golden, rtol=1e-3, atol=1e-3)
    with pytest.raises(queue.Empty):  # one input, one output
        output_queue.get(timeout=0.1)
