"""Decoder LLMs (Llama, GPT-NeoX, OPT styles) capture with their default config: the key/value cache
becomes graph outputs (rebuilt into the cache object), or is switched off with ``use_cache=False``; the
transformer blocks (causal masks, SDPA, rotary, RMSNorm, GQA) run on the device."""

import copy

import pytest
import torch

import pybuda
from pybuda.errors import CompileError
from pybuda.frontend.torch import capture
from pybuda.verify import calculate_pcc

transformers = pytest.importorskip("transformers")

SEQ = 20
VOCAB = 128


def _decoder(kind: str, attn: str = "sdpa"):
    common = dict(vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=64, attn_implementation=attn)
    if kind == "llama":  # head_dim 24, 4 query heads on 2 key/value heads
        config = transformers.LlamaConfig(hidden_size=96, intermediate_size=160, num_attention_heads=4,
                                          num_key_value_heads=2, **common)
        cls = transformers.LlamaForCausalLM
    elif kind == "neox":  # partial rotary (rotary_pct 0.25 of head_dim 24)
        config = transformers.GPTNeoXConfig(hidden_size=96, intermediate_size=160, num_attention_heads=4, **common)
        cls = transformers.GPTNeoXForCausalLM
    else:
        config = transformers.OPTConfig(hidden_size=80, ffn_dim=160, num_attention_heads=4, word_embed_proj_dim=80,
                                        **common)
        cls = transformers.OPTForCausalLM
    torch.manual_seed(0)
    return cls(config).eval()


def _ids(seed=1):
    return torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", ["llama", "neox", "opt"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_default_config_cache_becomes_graph_outputs(kind, attn, fe):
    model = _decoder(kind, attn)
    ids = _ids()
    result = capture(copy.deepcopy(model), {"input_ids": ids}, for_device=True)
    with torch.no_grad():
        want = model(input_ids=ids)
    got = result.run(input_ids=ids)
    layers = model.config.num_hidden_layers
    assert len(got) == 1 + 2 * layers  # logits, then one key and one value per layer
    rebuilt = result.unflatten_outputs(got)
    assert type(rebuilt.past_key_values) is type(want.past_key_values)
    fe.matches([rebuilt.logits], [want.logits], atol=1e-4)
    for mine, theirs in zip(rebuilt.past_key_values.layers, want.past_key_values.layers):
        fe.matches([mine.keys, mine.values], [theirs.keys, theirs.values], atol=1e-4)
    # Only embedding lookups (integer token ids) leave the device; OPT also looks up its positions.
    assert set(result.report.op_names()) <= {"aten.embedding.default"}, str(result.report)
    assert result.report.host_fraction < 0.06


@pytest.mark.parametrize("kind", ["llama", "opt"])
def test_use_cache_false_gives_logits_only(kind, fe):
    model = _decoder(kind)
    ids = _ids()
    result = capture(copy.deepcopy(model), {"input_ids": ids, "use_cache": False}, for_device=True)
    got = result.run(input_ids=ids)
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits
    assert len(got) == 1
    fe.matches(got, [want], atol=1e-4)


def test_padding_mask_input_runs_on_the_device(fe):
    # An integer attention_mask: its bool conversion and the mask gathers of the mask factory run on the device.
    model = _decoder("llama")
    ids = _ids()
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    mask[0, :5] = 0  # left padding
    result = capture(copy.deepcopy(model), {"input_ids": ids, "attention_mask": mask, "use_cache": False},
                     for_device=True)
    assert result.report.op_names() == ["aten.embedding.default"], str(result.report)
    got = result.run(input_ids=ids, attention_mask=mask)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    fe.matches(got, [want], atol=1e-4)


@pytest.mark.slow
def test_llama_default_config_on_the_golden_device():
    # Default config (cache outputs) and a left-padded integer attention mask, on the simulated chip.
    model = _decoder("llama")
    ids = _ids()
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    mask[0, :5] = 0
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask)
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("llama", copy.deepcopy(model)),
                             arch=pybuda.BackendDevice.Wormhole_B0)
    out = [t.value() for t in pybuda.run_inference(inputs=[(ids, mask)]).get(timeout=600)]
    assert device.cpu_fallback_device_post is None  # only the embedding lookup runs on the host (pre)
    assert len(out) == 1 + 2 * model.config.num_hidden_layers
    assert torch.isfinite(out[0]).all()
    assert calculate_pcc(out[0], want.logits) >= 0.99
    assert calculate_pcc(out[-1], want.past_key_values.layers[-1].values) >= 0.99


class ReturnsAnObject(torch.nn.Module):
    class Box:
        def __init__(self, t):
            self.t = t

    def forward(self, x):
        return self.Box(x * 2)


def test_unknown_output_object_is_a_clear_error():
    with pytest.raises(CompileError, match="cannot flatten into tensors.*use_cache=False"):
        capture(ReturnsAnObject(), (torch.randn(2, 3),))
