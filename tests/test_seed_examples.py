"""The runtime examples of seeds 000/001 as written (BERT encoder; BudaMatmul), checked against torch.

No Tenstorrent card here: ``devtype=BackendType.Silicon`` falls back to the simulated chip, so the
outputs carry the chip's numerics (default formats and fidelity) and are compared with PCC + allclose.
"""

import pytest
import torch

import pybuda
from pybuda import TTDevice
from seed_modules import BudaMatmul
from pybuda.verify import calculate_pcc

transformers = pytest.importorskip("transformers")
from transformers import BertConfig, BertModel  # noqa: E402

GET_TIMEOUT_S = 300
PCC_MIN = 0.99  # TT-Buda's default verification PCC
ATOL_REL = 0.1  # TT-Buda's default relative_atol (allclose atol = 0.1 x max |golden|)


@pytest.fixture(autouse=True)
def _clean_runtime(monkeypatch, tmp_path):
    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path))  # compile artifacts stay out of the work tree
    monkeypatch.setenv("PYBUDA_FORCE_SEQUENTIAL", "1")
    monkeypatch.delenv("PYBUDA_GOLDEN_FAST", raising=False)  # the chip's numerics, not plain float32
    pybuda.pybuda_reset()
    yield
    pybuda.pybuda_reset()


def _run_bert_seed(config):
    torch.manual_seed(0)
    # --- seed 000/001, example 1 (BertModel.from_pretrained replaced: no downloads in tests) ---
    model = BertModel(config)
    model.eval()  # from_pretrained returns an eval-mode model

    # Create a PyBUDA module from PyTorch model
    module = pybuda.PyTorchModule("bert_encoder", model.encoder)  # 2

    # Instantiate a tenstorrent device
    tt0 = pybuda.TTDevice(
        "tt0",
        module=module,
        arch=pybuda.BackendDevice.Wormhole_B0,
        devtype=pybuda.BackendType.Silicon,
    )  # 3

    # Create an input tensor
    seq_len = 128
    input = torch.randn(1, seq_len, model.config.hidden_size)

    # Compile + runtime inference on Tenstorrent device
    output_queue = pybuda.run_inference(inputs=[input])  # 4
    outputs = output_queue.get(timeout=GET_TIMEOUT_S)
    print(outputs)  # get last value from output queue
    # --- end of the seed ---

    assert tt0.arch == pybuda.BackendDevice.Wormhole_B0
    with torch.no_grad():
        golden = model.encoder(input)[0]
    got = outputs[0].value()
    assert tuple(got.shape) == tuple(golden.shape)
    assert calculate_pcc(golden, got) >= PCC_MIN
    assert torch.allclose(got, golden, rtol=0, atol=ATOL_REL * float(golden.abs().max()))


def test_seed_bert_encoder_small_config():
    _run_bert_seed(BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256))


@pytest.mark.slow
def test_seed_bert_encoder_bert_base():
    _run_bert_seed(BertConfig())  # the seed's model: BERT-base (12 layers, hidden 768), seq 128


# --- seed 001, example 2, exactly as written ---

def test_seed_buda_matmul():
    tt0 = TTDevice("grayskull0")  # Create a Tensorrent device
    lin0 = BudaMatmul("matmul0")  # Instantiate the above model
    w = torch.randn(1, 1, 32, 32)
    lin0.set_parameter("matmul0.weights", w)  # (the seed never sets them: TT-Buda ran with zeros)
    tt0.place_module(lin0)  # Place the model on TT device
    act = torch.rand(1, 1, 32, 32)  # Feed some random data to the device
    tt0.push_to_inputs(act)
    with pytest.warns(DeprecationWarning):  # num_inputs is TT-Buda's old spelling of input_count
        results = pybuda.run_inference(num_inputs=1, sequential=True)  # Run inference and collect the results
    out = results.get(timeout=GET_TIMEOUT_S)[0].value()
    golden = act @ w
    assert tuple(out.shape) == (1, 1, 32, 32)
    assert calculate_pcc(golden, out) >= PCC_MIN
    assert torch.allclose(out, golden, rtol=0, atol=ATOL_REL * float(golden.abs().max()))
    assert not torch.equal(out, golden)  # Grayskull's default formats/fidelity are visible
