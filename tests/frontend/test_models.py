"""Whole zoo models (tiny variants, random weights) capture and match PyTorch, with and without CPU fallback."""

import pytest
import torch

from pybuda.frontend.torch import capture
from pybuda.models import get_model

ZOO = [("bert", "tiny"), ("gpt2", "tiny"), ("vit", "tiny"), ("resnet", "tiny"), ("mobilenet_v1", "tiny"),
       ("mobilenet_v2", "tiny"), ("whisper", "mini")]


@pytest.mark.parametrize("name,variant", ZOO, ids=[n for n, _ in ZOO])
def test_zoo_model_matches_torch(name, variant, fe):
    spec = get_model(name, variant)
    result = capture(spec.module, spec.example_inputs, graph_name=spec.full_name)  # default config: fallback on
    want = fe.torch_outputs(spec.module, spec.example_inputs)
    fe.matches(result.run(*spec.example_inputs), want, atol=1e-3)
    # Everything but embeddings (cpu_fallback_ops) stays on the device.
    assert set(result.report.op_names()) <= {"aten.embedding.default"}
    assert result.report.host_fraction < 0.1
    names = [n.name for n in result.graph.parameters]
    assert names == [n for n in spec.module.state_dict() if n in set(names)]  # state-dict names, model order


@pytest.mark.parametrize("name,variant,lookup", [("gpt2", "tiny", True), ("whisper", "mini", False)],
                         ids=["gpt2", "whisper"])
def test_embeddings_on_device_without_fallback(name, variant, lookup, fe):
    # GPT-2 looks its input ids up (an embedding op); Whisper's positions are torch.arange, known at capture
    # time: a constant gather of the table's rows, no embedding op.
    spec = get_model(name, variant)
    result = capture(spec.module, spec.example_inputs, config=fe.no_fallback())
    assert result.pre is None and result.post is None
    assert ("embedding" in {n.op_type for n in result.graph.ops}) == lookup
    fe.matches(result.run(*spec.example_inputs), fe.torch_outputs(spec.module, spec.example_inputs), atol=1e-3)


def _hf_bert():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                     vocab_size=100, max_position_embeddings=64, attn_implementation="eager")
    torch.manual_seed(0)
    return transformers.BertModel(config).eval()


def test_hf_bert_model_parameter_names_and_embedding_fallback(fe):
    """A full transformers BertModel built from a config: state-dict names survive, the word embedding goes to the CPU."""
    model = _hf_bert()
    ids = torch.randint(0, 100, (1, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, 16, dtype=torch.int64)
    mask[0, 12:] = 0
    result = capture(model, {"input_ids": ids, "attention_mask": mask}, graph_name="bert")
    params = {n.name for n in result.graph.parameters}
    assert "encoder.layer.0.attention.self.query.weight" in params
    assert "encoder.layer.1.output.LayerNorm.bias" in params
    assert params <= set(dict(model.named_parameters()))
    assert result.input_names == ["input_ids", "attention_mask"]
    # Only the word embedding reads the input ids; the position and token-type lookups use the model's
    # constant ids, so they stay on the device, where consteval folds them.
    assert result.report.op_names() == ["aten.embedding.default"]
    assert all(f.side == "pre" for f in result.report.fallback_ops)
    assert all("modeling_bert.py:" in f.location for f in result.report.fallback_ops)
    got = result.run(input_ids=ids, attention_mask=mask)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask)
    fe.matches(got, [want.last_hidden_state, want.pooler_output], atol=1e-4)
    rebuilt = result.unflatten_outputs(got)
    assert torch.equal(rebuilt.last_hidden_state, got[0])
    # Source lines of device ops point into the model code.
    sources = {n.tags.get("source", "") for n in result.graph.ops}
    assert any("modeling_bert.py:" in s for s in sources)


@pytest.mark.slow
def test_bert_base_encoder_matches_torch(fe):
    spec = get_model("bert", "base", seq_len=64, num_hidden_layers=4)
    result = capture(spec.module, spec.example_inputs)
    fe.matches(result.run(*spec.example_inputs), fe.torch_outputs(spec.module, spec.example_inputs), atol=1e-3)


@pytest.mark.slow
def test_resnet50_matches_torch(fe):
    spec = get_model("resnet", "resnet50", image_size=64)
    result = capture(spec.module, spec.example_inputs)
    assert result.timings["decompose"] < 0.05  # in-place residual adds are functionalized cheaply
    fe.matches(result.run(*spec.example_inputs), fe.torch_outputs(spec.module, spec.example_inputs), atol=1e-3)
