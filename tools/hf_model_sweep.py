"""Sweep Hugging Face architectures (tiny configs, random weights) through pybuda's golden device.

Each model is built from its transformers Config (hidden ~64, 2 layers, short sequences, small images),
wrapped in a module that returns tensors, run once in PyTorch and once through ``TTDevice`` /
``run_inference`` (Float32, HiFi4: the sweep looks for wrong mechanisms, not for the chip's rounding), and
classified:

* ``DEVICE``            every op ran on the simulated chip and the outputs match PyTorch;
* ``PARTIAL-FALLBACK``  outputs match, with some ops on the CPU (the fallback report's host share);
* ``CLEAR-ERROR``       a :class:`pybuda.errors.PybudaError` (the message is printed: judge its clarity);
* ``WRONG``             the run finished but an output's shape differs, its PCC is below 0.99 or it is not
                        allclose (``RTOL``, and ``ATOL`` times the output's largest magnitude) — a wrong number
                        without an error;
* ``CRASH``             any other exception, or no answer within the timeout (a hang);
* ``NUMERICS``          (``--chip-formats`` only) the outputs miss the PCC at the chip's formats but match when the
                        golden backend computes in plain float32 (``golden_ignore_df_precision``): the program is
                        right, the output's spread is within the formats' rounding (box coordinates all near 0.5).

Every model runs in its own subprocess (a crash or a hang does not take the sweep down)::

    python tools/hf_model_sweep.py                       # all models, Wormhole B0, Float32
    python tools/hf_model_sweep.py --filter 't5|bart'    # a regex over model names
    python tools/hf_model_sweep.py --arch gs --list
    python tools/hf_model_sweep.py --batch 2 --device-embeddings   # 2 samples a push, embeddings on the chip
    python tools/hf_model_sweep.py --one t5 --verbose    # in-process, with the traceback and the report

``build(name)`` returns ``(module, inputs)`` for the tests (``tests/models/test_hf_sweep.py``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

import os

import torch
from torch import nn

if __name__ == "__main__":  # run as a script: import this checkout's pybuda, not an installed one
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PCC_MIN = 0.99
RTOL, ATOL = 1e-2, 1e-2
TIMEOUT_S = 300
CLASSES = ("DEVICE", "PARTIAL-FALLBACK", "CLEAR-ERROR", "NUMERICS", "WRONG", "CRASH")

SEQ = 16
IMG = 32
VOCAB = 256

# ---------------------------------------------------------------------------------------------- wrappers


class Pick(nn.Module):
    """``forward(*inputs)`` calls the HF model with ``inputs`` as keywords named ``names`` (plus ``extra``)
    and returns the output fields ``fields`` (a tensor, or a tuple of tensors)."""

    def __init__(self, model: nn.Module, names: Tuple[str, ...], fields: Tuple[str, ...],
                 extra: Optional[Dict[str, Any]] = None, method: Optional[str] = None):
        super().__init__()
        self.model = model
        self.names = names
        self.fields = fields
        self.extra = dict(extra or {})
        self.method = method

    def forward(self, *inputs: torch.Tensor):
        fn = getattr(self.model, self.method) if self.method else self.model
        out = fn(**dict(zip(self.names, inputs)), **self.extra)
        if isinstance(out, torch.Tensor):
            return out
        got = tuple(_cache_tensors(out[f] if isinstance(out, dict) else getattr(out, f)) for f in self.fields)
        got = tuple(g.pooler_output if not isinstance(g, torch.Tensor) and hasattr(g, "pooler_output") else g
                    for g in got)
        return got[0] if len(got) == 1 else got


def _cache_tensors(value: Any) -> Any:
    """A transformers key/value cache as a tuple of its keys and values per layer (other values as they are)."""
    layers = getattr(value, "layers", None)
    if layers is None or isinstance(value, (torch.Tensor, tuple, list)):
        return value
    return tuple(t for layer in layers for t in (layer.keys, layer.values))


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(1234 + seed)


def _ids(vocab: int = VOCAB, seq: int = SEQ, batch: int = 1, low: int = 3) -> torch.Tensor:
    return torch.randint(low, vocab, (batch, seq), generator=_gen())


def _mask(seq: int = SEQ, pad: int = 4) -> torch.Tensor:
    m = torch.ones(1, seq, dtype=torch.long)
    m[:, seq - pad:] = 0
    return m


def _pixels(channels: int = 3, size: int = IMG) -> torch.Tensor:
    return torch.randn(1, channels, size, size, generator=_gen(1))


def _cfg(cls_name: str, **kw: Any):
    import transformers

    cls = getattr(transformers, cls_name)
    kw.setdefault("attn_implementation", "eager")
    try:
        config = cls(**kw)
    except TypeError:
        kw.pop("attn_implementation")
        config = cls(**kw)
    for key, value in config.to_dict().items():  # inference: no dropout anywhere
        if isinstance(value, float) and any(s in key for s in ("dropout", "pdrop", "layerdrop")):
            setattr(config, key, 0.0)
    return config


def _model(cls_name: str, config) -> nn.Module:
    import transformers

    torch.manual_seed(0)
    return getattr(transformers, cls_name)(config).eval()


BERTISH = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
               max_position_embeddings=64)
DECODER = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               max_position_embeddings=64)


def _encoder(cfg_cls: str, model_cls: str, field: str = "last_hidden_state", mask: bool = True,
             base: Optional[Dict[str, Any]] = None, **kw):
    def build():
        config = _cfg(cfg_cls, **{**(BERTISH if base is None else base), **kw})
        model = _model(model_cls, config)
        names = ("input_ids", "attention_mask") if mask else ("input_ids",)
        inputs = (_ids(),) + ((_mask(),) if mask else ())
        return Pick(model, names, (field,)), inputs
    return build


def _causal(cfg_cls: str, model_cls: str, **kw):
    def build():
        config = _cfg(cfg_cls, **{**DECODER, **kw})
        model = _model(model_cls, config)
        return Pick(model, ("input_ids",), ("logits",), extra=dict(use_cache=False)), (_ids(),)
    return build


def _batched_experts(build):
    """``build`` with the model's MoE experts run by transformers' ``batched_mm`` implementation."""
    def wrapped():
        module, inputs = build()
        module.model.config._experts_implementation = "batched_mm"
        return module, inputs
    return wrapped


def _seq2seq(cfg_cls: str, model_cls: str, **kw):
    def build():
        config = _cfg(cfg_cls, **kw)
        model = _model(model_cls, config)
        dec = torch.randint(3, VOCAB, (1, 8), generator=_gen(2))
        return (Pick(model, ("input_ids", "attention_mask", "decoder_input_ids"), ("logits",),
                     extra=dict(use_cache=False)), (_ids(), _mask(), dec))
    return build


def _vision(cfg_cls: str, model_cls: str, field: str = "logits", size: int = IMG, **kw):
    def build():
        config = _cfg(cfg_cls, **kw)
        model = _model(model_cls, config)
        return Pick(model, ("pixel_values",), (field,)), (_pixels(size=size),)
    return build


def _vit_mae():
    """ViT-MAE shuffles its patches by a random noise: the noise is an input, so both runs see the same."""
    config = _cfg("ViTMAEConfig", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  image_size=IMG, patch_size=8, mask_ratio=0.5)
    model = _model("ViTMAEModel", config)
    noise = torch.rand(1, (IMG // 8) ** 2, generator=_gen(10))
    return Pick(model, ("pixel_values", "noise"), ("last_hidden_state",)), (_pixels(), noise)


def _clip_text():
    config = _cfg("CLIPTextConfig", vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=64, projection_dim=32)
    model = _model("CLIPTextModelWithProjection", config)
    return Pick(model, ("input_ids",), ("text_embeds",)), (_ids(),)


def _clip():
    import transformers

    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64)
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=IMG,
                  patch_size=8)
    config = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=32)
    model = _model("CLIPModel", config)
    return Pick(model, ("input_ids", "pixel_values"), ("logits_per_image",)), (_ids(), _pixels())


def _t5_encoder():
    config = _cfg("T5Config", vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                  relative_attention_num_buckets=8)
    model = _model("T5EncoderModel", config)
    return Pick(model, ("input_ids", "attention_mask"), ("last_hidden_state",)), (_ids(), _mask())


T5 = dict(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
          relative_attention_num_buckets=8, decoder_start_token_id=0)
BART = dict(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64)

#: name -> builder returning ``(module, inputs)``.
MODELS: Dict[str, Callable[[], Tuple[nn.Module, Tuple[torch.Tensor, ...]]]] = {
    # encoders
    "distilbert": _encoder("DistilBertConfig", "DistilBertModel", dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                           vocab_size=VOCAB, max_position_embeddings=64),
    "roberta": _encoder("RobertaConfig", "RobertaModel", pad_token_id=1),
    "xlm_roberta": _encoder("XLMRobertaConfig", "XLMRobertaForMaskedLM", field="logits", pad_token_id=1),
    "albert": _encoder("AlbertConfig", "AlbertModel", embedding_size=32),
    "electra": _encoder("ElectraConfig", "ElectraForSequenceClassification", field="logits", embedding_size=32),
    "deberta_v2": _encoder("DebertaV2Config", "DebertaV2Model", position_buckets=16, max_relative_positions=32,
                           relative_attention=True, pos_att_type=["p2c", "c2p"]),
    "mpnet": _encoder("MPNetConfig", "MPNetModel"),
    "mobilebert": _encoder("MobileBertConfig", "MobileBertModel", embedding_size=32, intra_bottleneck_size=32,
                           true_hidden_size=32, num_feedforward_networks=2),
    "data2vec_text": _encoder("Data2VecTextConfig", "Data2VecTextModel", pad_token_id=1),
    "electra_nomask": _encoder("ElectraConfig", "ElectraModel", mask=False, embedding_size=32),
    "squeezebert": _encoder("SqueezeBertConfig", "SqueezeBertModel", embedding_size=64, q_groups=2, k_groups=2,
                            v_groups=2, post_attention_groups=2, intermediate_groups=2, output_groups=2),
    "roformer": _encoder("RoFormerConfig", "RoFormerModel", embedding_size=64),
    "ernie": _encoder("ErnieConfig", "ErnieModel"),
    "funnel": _encoder("FunnelConfig", "FunnelBaseModel", base=dict(vocab_size=VOCAB), block_sizes=[1, 1],
                       d_model=64, n_head=4, d_head=16, d_inner=128),
    # decoders
    "falcon": _causal("FalconConfig", "FalconForCausalLM", new_decoder_architecture=False, multi_query=True),
    "mistral": _causal("MistralConfig", "MistralForCausalLM", num_key_value_heads=2, sliding_window=None),
    "qwen2": _causal("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2),
    "qwen3": _causal("Qwen3Config", "Qwen3ForCausalLM", num_key_value_heads=2, head_dim=16),
    "phi": _causal("PhiConfig", "PhiForCausalLM", partial_rotary_factor=0.5),
    "phi3": _causal("Phi3Config", "Phi3ForCausalLM", num_key_value_heads=4, pad_token_id=0),
    "gemma": _causal("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=1, head_dim=16),
    "gemma2": _causal("Gemma2Config", "Gemma2ForCausalLM", num_key_value_heads=2, head_dim=16, sliding_window=8),
    "bloom": _causal("BloomConfig", "BloomForCausalLM", n_layer=2, n_head=4),
    "gptj": _causal("GPTJConfig", "GPTJForCausalLM", n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=64),
    "codegen": _causal("CodeGenConfig", "CodeGenForCausalLM", n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                       n_positions=64, n_ctx=64),
    "gpt_bigcode": _causal("GPTBigCodeConfig", "GPTBigCodeForCausalLM", n_embd=64, n_layer=2, n_head=4,
                           n_positions=64, multi_query=True),
    "stablelm": _causal("StableLmConfig", "StableLmForCausalLM", num_key_value_heads=4, partial_rotary_factor=0.25),
    "starcoder2": _causal("Starcoder2Config", "Starcoder2ForCausalLM", num_key_value_heads=2, sliding_window=None),
    "olmo": _causal("OlmoConfig", "OlmoForCausalLM", pad_token_id=0),
    "mpt": _causal("MptConfig", "MptForCausalLM", d_model=64, n_heads=4, n_layers=2, expansion_ratio=2,
                   max_seq_len=64),
    "xglm": _causal("XGLMConfig", "XGLMForCausalLM", d_model=64, num_layers=2, attention_heads=4, ffn_dim=128),
    "biogpt": _causal("BioGptConfig", "BioGptForCausalLM"),
    "mixtral": _causal("MixtralConfig", "MixtralForCausalLM", num_key_value_heads=2, num_local_experts=4,
                       num_experts_per_tok=2),
    # transformers' batched experts (every token through its top-k experts by gathers and bmm: no loop over values)
    "mixtral_batched_mm": _batched_experts(_causal("MixtralConfig", "MixtralForCausalLM", num_key_value_heads=2,
                                                   num_local_experts=4, num_experts_per_tok=2)),
    # encoder-decoders
    "t5_encoder": _t5_encoder,
    "t5": _seq2seq("T5Config", "T5ForConditionalGeneration", **T5),
    "bart": _seq2seq("BartConfig", "BartForConditionalGeneration", **BART),
    "mbart": _seq2seq("MBartConfig", "MBartForConditionalGeneration", **BART),
    "pegasus": _seq2seq("PegasusConfig", "PegasusForConditionalGeneration", **BART),
    "marian": _seq2seq("MarianConfig", "MarianMTModel", decoder_vocab_size=VOCAB, pad_token_id=VOCAB - 1,
                       decoder_start_token_id=VOCAB - 1, **BART),
    # vision
    "deit": _vision("DeiTConfig", "DeiTForImageClassificationWithTeacher", hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=128, image_size=IMG, patch_size=8, num_labels=10),
    "beit": _vision("BeitConfig", "BeitForImageClassification", hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=128, image_size=IMG, patch_size=8, num_labels=10,
                    use_relative_position_bias=True),
    "data2vec_vision": _vision("Data2VecVisionConfig", "Data2VecVisionForImageClassification", hidden_size=64,
                               num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=IMG,
                               patch_size=8, num_labels=10),
    "dinov2": _vision("Dinov2Config", "Dinov2Model", field="pooler_output", hidden_size=64, num_hidden_layers=2,
                      num_attention_heads=4, mlp_ratio=2, image_size=IMG, patch_size=8),
    "segformer": _vision("SegformerConfig", "SegformerForSemanticSegmentation", num_encoder_blocks=2,
                         depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                         patch_sizes=[7, 3], strides=[4, 2], decoder_hidden_size=32, num_labels=5,
                         mlp_ratios=[2, 2]),
    "regnet": _vision("RegNetConfig", "RegNetForImageClassification", embedding_size=16, hidden_sizes=[16, 32],
                      depths=[1, 1], groups_width=8, num_labels=10),
    "efficientnet": _vision("EfficientNetConfig", "EfficientNetForImageClassification", image_size=IMG,
                            width_coefficient=0.25, depth_coefficient=0.25, num_labels=10),
    "mobilenet_v2": _vision("MobileNetV2Config", "MobileNetV2ForImageClassification", depth_multiplier=0.25,
                            image_size=IMG, num_labels=10),
    "mobilenet_v1": _vision("MobileNetV1Config", "MobileNetV1ForImageClassification", depth_multiplier=0.25,
                            image_size=IMG, num_labels=10),
    "poolformer": _vision("PoolFormerConfig", "PoolFormerForImageClassification", depths=[1, 1],
                          hidden_sizes=[16, 32], num_encoder_blocks=2, patch_sizes=[7, 3], strides=[4, 2],
                          padding=[2, 1], num_labels=10),
    "levit": _vision("LevitConfig", "LevitForImageClassification", size=64, image_size=64, hidden_sizes=[32, 48],
                     num_attention_heads=[2, 3], depths=[1, 1], key_dim=[8, 8], drop_path_rate=0,
                     mlp_ratio=[2, 2], attention_ratio=[2, 2],
                     down_ops=[["Subsample", 8, 2, 4, 2, 2]], num_labels=10),
    "convnextv2": _vision("ConvNextV2Config", "ConvNextV2ForImageClassification", hidden_sizes=[16, 32],
                          depths=[1, 1], num_stages=2, num_labels=10),
    "swinv2": _vision("Swinv2Config", "Swinv2ForImageClassification", image_size=IMG, patch_size=2, embed_dim=16,
                      depths=[1, 1], num_heads=[1, 2], window_size=4, num_labels=10),
    "focalnet": _vision("FocalNetConfig", "FocalNetForImageClassification", image_size=IMG, patch_size=4,
                        embed_dim=16, depths=[1, 1], focal_levels=[2, 2], focal_windows=[3, 3], num_labels=10),
    "pvt_v2": _vision("PvtV2Config", "PvtV2ForImageClassification", num_encoder_blocks=2, depths=[1, 1],
                      sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2], patch_sizes=[7, 3],
                      strides=[4, 2], mlp_ratios=[2, 2], num_labels=10),
    "vit_mae": _vit_mae,
    "siglip_vision": _vision("SiglipVisionConfig", "SiglipVisionModel", field="pooler_output", hidden_size=64,
                             num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=IMG,
                             patch_size=8),
    "clip_vision": _vision("CLIPVisionConfig", "CLIPVisionModelWithProjection", field="image_embeds",
                           hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                           image_size=IMG, patch_size=8, projection_dim=32),
    "clip_text": _clip_text,
    "clip": _clip,
}


def _with(build_fn: Callable[[], Tuple[nn.Module, Tuple[torch.Tensor, ...]]], **extra: Any):
    """``build_fn``'s model called with extra keyword arguments (``output_hidden_states``, ``use_cache``...)
    and returning the fields ``fields`` (default: what ``build_fn`` picks)."""
    fields = extra.pop("fields", None)

    def build():
        module, inputs = build_fn()
        module.extra.update(extra)
        if fields:
            module.fields = tuple(fields)
        return module, inputs
    return build


def _seqcls_decoder(cfg_cls: str, model_cls: str, **kw):
    """A decoder's sequence classification head: it picks the last non-pad token of each row (a run-time
    index computed from the ids)."""
    def build():
        config = _cfg(cfg_cls, **{**DECODER, "pad_token_id": 0, "num_labels": 3, **kw})
        model = _model(model_cls, config)
        ids = _ids()
        ids[:, -3:] = 0  # right padding
        return Pick(model, ("input_ids",), ("logits",), extra=dict(use_cache=False)), (ids,)
    return build


def _seq2seq_loss():
    config = _cfg("T5Config", **T5)
    model = _model("T5ForConditionalGeneration", config)
    labels = torch.randint(3, VOCAB, (1, 8), generator=_gen(3))
    labels[:, -2:] = -100  # ignored positions
    return Pick(model, ("input_ids", "labels"), ("loss", "logits")), (_ids(), labels)


def _multiple_choice():
    config = _cfg("BertConfig", **BERTISH)
    model = _model("BertForMultipleChoice", config)
    ids = torch.randint(3, VOCAB, (1, 3, SEQ), generator=_gen())
    return Pick(model, ("input_ids",), ("logits",)), (ids,)


def _layoutlm():
    config = _cfg("LayoutLMConfig", **BERTISH, max_2d_position_embeddings=128)
    model = _model("LayoutLMModel", config)
    bbox = torch.randint(0, 60, (1, SEQ, 4), generator=_gen(4)).sort(-1).values[..., [0, 1, 2, 3]]
    bbox = torch.stack([bbox[..., 0], bbox[..., 1], bbox[..., 0] + 10, bbox[..., 1] + 10], -1)
    return Pick(model, ("input_ids", "bbox"), ("last_hidden_state",)), (_ids(), bbox)


def _audio(cfg_cls: str, model_cls: str, field: str = "last_hidden_state", **kw):
    def build():
        config = _cfg(cfg_cls, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                      num_conv_pos_embedding_groups=2, **kw)
        model = _model(model_cls, config)
        return Pick(model, ("input_values",), (field,)), (torch.randn(1, 400, generator=_gen(5)),)
    return build


def _ast():
    config = _cfg("ASTConfig", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  patch_size=8, frequency_stride=8, time_stride=8, max_length=32, num_mel_bins=32, num_labels=5)
    model = _model("ASTForAudioClassification", config)
    return Pick(model, ("input_values",), ("logits",)), (torch.randn(1, 32, 32, generator=_gen(6)),)


def _video(cfg_cls: str, model_cls: str, field: str = "last_hidden_state", **kw):
    def build():
        config = _cfg(cfg_cls, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                      image_size=IMG, patch_size=8, num_frames=4, **kw)
        model = _model(model_cls, config)
        return Pick(model, ("pixel_values",), (field,)), (torch.randn(1, 4, 3, IMG, IMG, generator=_gen(7)),)
    return build


def _patchtst():
    config = _cfg("PatchTSTConfig", num_input_channels=3, context_length=32, patch_length=8, patch_stride=8,
                  d_model=32, num_attention_heads=4, num_hidden_layers=2, ffn_dim=64, prediction_length=8)
    model = _model("PatchTSTForPrediction", config)
    return Pick(model, ("past_values",), ("prediction_outputs",)), (torch.randn(1, 32, 3, generator=_gen(8)),)


def _decision_transformer():
    config = _cfg("DecisionTransformerConfig", state_dim=5, act_dim=3, hidden_size=64, n_layer=2, n_head=4,
                  max_ep_len=64, n_positions=64)
    model = _model("DecisionTransformerModel", config)
    g = _gen(9)
    t = 6
    inputs = (torch.randn(1, t, 5, generator=g), torch.randn(1, t, 3, generator=g), torch.randn(1, t, 1, generator=g),
              torch.randn(1, t, 1, generator=g), torch.arange(t)[None], torch.ones(1, t, dtype=torch.long))
    return Pick(model, ("states", "actions", "rewards", "returns_to_go", "timesteps", "attention_mask"),
                ("action_preds",)), inputs


EXOTIC = {
    "fnet": _encoder("FNetConfig", "FNetModel", mask=False, base=dict(vocab_size=VOCAB, hidden_size=64,
                     num_hidden_layers=2, intermediate_size=128, max_position_embeddings=64)),
    "xlnet": _encoder("XLNetConfig", "XLNetModel", base=dict(vocab_size=VOCAB, d_model=64, n_layer=2, n_head=4,
                      d_inner=128)),
    "convbert": _encoder("ConvBertConfig", "ConvBertModel", embedding_size=64, conv_kernel_size=3, head_ratio=2),
    "canine": _encoder("CanineConfig", "CanineModel", base=dict(hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=128, downsampling_rate=4, num_hash_functions=4,
                       num_hash_buckets=64, local_transformer_stride=8, max_position_embeddings=64)),
    "yoso": _encoder("YosoConfig", "YosoModel", use_expectation=True, conv_window=None),
    "esm": _encoder("EsmConfig", "EsmModel", pad_token_id=1, position_embedding_type="rotary", token_dropout=False),
    "rembert": _encoder("RemBertConfig", "RemBertModel", input_embedding_size=32, output_embedding_size=32),
    "ibert": _encoder("IBertConfig", "IBertModel", pad_token_id=1, quant_mode=False),
    "bigbird": _encoder("BigBirdConfig", "BigBirdModel", attention_type="original_full"),
    "longformer": _encoder("LongformerConfig", "LongformerModel", attention_window=4, pad_token_id=1),
    "luke": _encoder("LukeConfig", "LukeModel", entity_vocab_size=16, entity_emb_size=32, pad_token_id=1),
    "layoutlm": _layoutlm,
    "bert_multiple_choice": _multiple_choice,
    "bert_qa": _with(_encoder("BertConfig", "BertForQuestionAnswering"), fields=("start_logits", "end_logits")),
    "bert_hidden_states": _with(_encoder("BertConfig", "BertModel"), output_hidden_states=True,
                                output_attentions=True, fields=("last_hidden_state", "hidden_states", "attentions")),
    "qwen2_seqcls": _seqcls_decoder("Qwen2Config", "Qwen2ForSequenceClassification", num_key_value_heads=2),
    "gpt2_seqcls": _seqcls_decoder("GPT2Config", "GPT2ForSequenceClassification", n_embd=64, n_layer=2, n_head=4,
                                   n_positions=64),
    "llama_kv_cache": _with(_causal("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2), use_cache=True,
                            fields=("logits", "past_key_values")),
    "t5_loss": _seq2seq_loss,
    "mamba": _causal("MambaConfig", "MambaForCausalLM", state_size=8, expand=2, conv_kernel=4, time_step_rank=8),
    "rwkv": _causal("RwkvConfig", "RwkvForCausalLM", attention_hidden_size=64, context_length=64),
    "recurrent_gemma": _causal("RecurrentGemmaConfig", "RecurrentGemmaForCausalLM", num_key_value_heads=1,
                               head_dim=16, lru_width=64, attention_window_size=8, block_types=["recurrent",
                               "attention"], logits_soft_cap=30.0),
    "cohere": _causal("CohereConfig", "CohereForCausalLM", num_key_value_heads=2),
    "granite": _causal("GraniteConfig", "GraniteForCausalLM", num_key_value_heads=2),
    "opt_350m_style": _causal("OPTConfig", "OPTForCausalLM", ffn_dim=128, word_embed_proj_dim=32,
                              do_layer_norm_before=False),
    "hubert": _audio("HubertConfig", "HubertModel"),
    "sew": _audio("SEWConfig", "SEWModel", squeeze_factor=2),
    "unispeech": _audio("UniSpeechConfig", "UniSpeechModel"),
    "ast": _ast,
    "videomae": _video("VideoMAEConfig", "VideoMAEModel", tubelet_size=2),
    "timesformer": _video("TimesformerConfig", "TimesformerModel"),
    "patchtst": _patchtst,
    "decision_transformer": _decision_transformer,
    "perceiver": _vision("PerceiverConfig", "PerceiverForImageClassificationLearned", num_latents=8, d_latents=32,
                         d_model=32, num_blocks=1, num_self_attends_per_block=2, num_self_attention_heads=2,
                         num_cross_attention_heads=1, image_size=IMG, num_labels=10),
    "mobilevitv2": _vision("MobileViTV2Config", "MobileViTV2ForImageClassification", size=64, image_size=64,
                           width_multiplier=0.25, num_labels=10),
    "mobilevit": _vision("MobileViTConfig", "MobileViTForImageClassification", image_size=64, hidden_sizes=[32, 40, 48],
                         neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64], num_labels=10),
    "yolos": _vision("YolosConfig", "YolosForObjectDetection", field="pred_boxes", hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=128, image_size=[IMG, IMG], patch_size=8,
                     num_detection_tokens=4),
    "dpt": _vision("DPTConfig", "DPTForDepthEstimation", field="predicted_depth", hidden_size=64, num_hidden_layers=4,
                   num_attention_heads=4, intermediate_size=128, image_size=IMG, patch_size=8,
                   backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[16, 32, 32, 64], fusion_hidden_size=32,
                   reassemble_factors=[4, 2, 1, 0.5], head_in_index=-1),
    "swin2sr": _vision("Swin2SRConfig", "Swin2SRForImageSuperResolution", field="reconstruction", image_size=16,
                       size=16, patch_size=1, embed_dim=16, depths=[1], num_heads=[2], window_size=4, upscale=2),
    "vitdet": _vision("VitDetConfig", "VitDetModel", field="last_hidden_state", hidden_size=64, num_hidden_layers=2,
                      num_attention_heads=4, mlp_ratio=2, image_size=IMG, pretrain_image_size=IMG, patch_size=8,
                      window_size=2, window_block_indices=[0], use_relative_position_embeddings=True),
    "groupvit": _vision("GroupViTVisionConfig", "GroupViTVisionModel", field="pooler_output", hidden_size=64,
                        depths=[1, 1], num_group_tokens=[8, 0], num_output_groups=[4, 4], num_attention_heads=4,
                        intermediate_size=128, image_size=IMG, patch_size=8),
}
MODELS.update(EXOTIC)

def build(name: str) -> Tuple[nn.Module, Tuple[torch.Tensor, ...]]:
    """``(module, inputs)`` of sweep model ``name``: an eval-mode module returning a tensor or tuple."""
    module, inputs = MODELS[name]()
    return module.eval(), inputs


# ------------------------------------------------------------------------------------------------ running


def _flat(out: Any) -> List[torch.Tensor]:
    from pybuda.module import flatten_torch_outputs

    if isinstance(out, (list, tuple)):
        out = tuple(t.value() if hasattr(t, "value") and not isinstance(t, torch.Tensor) else t for t in out)
    return list(flatten_torch_outputs(out))


def batched(inputs: Tuple[torch.Tensor, ...], batch: int) -> Tuple[torch.Tensor, ...]:
    """``inputs`` (batch 1) as a batch of ``batch`` samples: sample i rolls every input by i along dim 1 (ids,
    masks and images stay valid inputs, and the samples differ)."""
    if batch == 1:
        return inputs
    return tuple(torch.cat([t.roll(i, dims=1) if t.dim() > 1 else t for i in range(batch)]) for t in inputs)


def compare(got: List[torch.Tensor], want: List[torch.Tensor], chip_formats: bool = False,
            reference: str = "PyTorch") -> Tuple[Optional[float], List[str]]:
    """``(lowest PCC, problems)`` of outputs ``got`` against ``want``: shapes equal, integer outputs exactly
    equal, float outputs PCC >= ``PCC_MIN`` and (unless ``chip_formats``) allclose by ``RTOL`` and ``ATOL``
    times the output's largest magnitude. No problems: the outputs match."""
    from pybuda.verify import calculate_pcc

    if len(got) != len(want):
        return None, [f"{len(got)} outputs, {reference} gives {len(want)}"]
    pccs, problems = [], []
    for i, (g, w) in enumerate(zip(got, want)):
        if tuple(g.shape) != tuple(w.shape):
            problems.append(f"output {i}: shape {list(g.shape)} vs {list(w.shape)}")
            continue
        if not w.is_floating_point():
            if not torch.equal(g.to(w.dtype), w):
                problems.append(f"output {i}: integer values differ")
            continue
        pcc = calculate_pcc(g.float(), w.float()) if w.numel() > 1 else None  # no correlation of one value
        if pcc is not None:
            pccs.append(pcc)
        if pcc is not None and pcc < PCC_MIN:
            problems.append(f"output {i}: PCC {pcc:.4f}")
        elif not chip_formats and \
                not torch.allclose(g.float(), w.float(), rtol=RTOL, atol=ATOL * max(1.0, w.abs().max().item())):
            err = (g.float() - w.float()).abs().max().item()
            problems.append(f"output {i}: not allclose (max abs err {err:.3g})")
    return (round(min(pccs), 6) if pccs else None), problems


def failed(result: Dict[str, Any], exc: Exception, verbose: bool = False) -> Dict[str, Any]:
    """``result`` of a device run that raised ``exc``: CLEAR-ERROR for a :class:`pybuda.errors.PybudaError` (its
    message is the detail), CRASH for anything else (with the traceback's end); the traceback printed if ``verbose``."""
    from pybuda.errors import PybudaError

    if isinstance(exc, PybudaError):
        result.update(cls="CLEAR-ERROR", detail=f"{type(exc).__name__}: {exc}")
    else:
        result.update(cls="CRASH", detail=f"{type(exc).__name__}: {exc}\n" + traceback.format_exc()[-1500:])
    if verbose:
        traceback.print_exc()
    return result


def run_one(name: str, arch: str = "wh", verbose: bool = False, batch: int = 1,
            device_embeddings: bool = False, chip_formats: bool = False) -> Dict[str, Any]:
    """Run sweep model ``name`` on the golden device of ``arch`` ('wh' or 'gs'); a result dict (see module doc).
    ``batch``: samples per push; ``device_embeddings``: embedding out of ``cpu_fallback_ops``; ``chip_formats``:
    the default data formats and fidelity instead of Float32/HiFi4 (judged by PCC alone)."""
    import pybuda.frontend.torch as frontend

    result: Dict[str, Any] = dict(name=name, arch=arch, cls=None, pcc=None, host=None, detail="")
    t0 = time.time()
    try:
        module, inputs = build(name)
        inputs = batched(inputs, batch)
        with torch.no_grad():
            want = _flat(module(*inputs))
    except Exception as exc:  # the model itself does not run in PyTorch: not pybuda's problem
        result.update(cls="SKIP", detail=f"does not build/run in PyTorch: {type(exc).__name__}: {exc}"[:300])
        return result

    reports: List[Any] = []
    real_capture = frontend.capture

    def capture(*args: Any, **kwargs: Any):
        got = real_capture(*args, **kwargs)
        reports.append(got.report)
        return got

    frontend.capture = capture
    try:
        got = _run_on_device(name, module, inputs, arch, device_embeddings, chip_formats)
    except Exception as exc:
        return failed(result, exc, verbose)
    finally:
        frontend.capture = real_capture
    result["seconds"] = round(time.time() - t0, 1)
    report = reports[-1] if reports else None
    if report is not None:
        result["host"] = round(report.host_fraction, 4)
        if verbose:
            print(report)
    pcc, problems = compare(got, want, chip_formats)
    result["pcc"] = pcc
    if problems and chip_formats:
        try:  # the chip's rounding, or a wrong program? The same compile, computed in plain float32.
            exact = _run_on_device(name, module, inputs, arch, device_embeddings, chip_formats, exact=True)
            if not compare(exact, want, chip_formats)[1]:
                result.update(cls="NUMERICS", detail="; ".join(problems) + " (matches in plain float32)")
                return result
        except Exception as exc:  # noqa: BLE001 -- the rerun failing leaves the run WRONG
            problems.append(f"the plain-float32 rerun failed: {type(exc).__name__}: {exc}"[:300])
    if problems:
        result.update(cls="WRONG", detail="; ".join(problems))
    elif report is not None and report.has_fallback:
        ops = sorted(set(report.op_names()))
        result.update(cls="PARTIAL-FALLBACK", detail=", ".join(ops)[:300])
    else:
        result["cls"] = "DEVICE"
    return result


def _run_on_device(name: str, module: nn.Module, inputs: Tuple[torch.Tensor, ...], arch: str,
                   device_embeddings: bool, chip_formats: bool, exact: bool = False) -> List[torch.Tensor]:
    """``module``'s outputs on a fresh golden device of ``arch`` (see :func:`run_one`); ``exact``: the golden backend
    computes in plain float32 (``golden_ignore_df_precision``) instead of the chip's arithmetic."""
    import pybuda

    pybuda.pybuda_reset()
    try:
        if not chip_formats:
            pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                             math_fidelity=pybuda.MathFidelity.HiFi4)
        if device_embeddings:
            pybuda.set_configuration_options(cpu_fallback_ops=[])
        if exact:
            pybuda.set_configuration_options(golden_ignore_df_precision=True)
        arch_enum = {"wh": pybuda.BackendDevice.Wormhole_B0, "gs": pybuda.BackendDevice.Grayskull}[arch]
        pybuda.TTDevice("tt0", module=pybuda.PyTorchModule(name, module), arch=arch_enum)
        return _flat(pybuda.run_inference(inputs=[inputs]).get(timeout=TIMEOUT_S))
    finally:
        try:
            pybuda.shutdown()
        except Exception:
            pass


def _subprocess(name: str, arch: str, timeout: int, extra: List[str]) -> Dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", name, "--arch", arch, "--json", *extra]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(name=name, arch=arch, cls="CRASH", pcc=None, host=None, detail=f"hang: no answer in {timeout}s")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            out = json.loads(line)
            out.setdefault("seconds", round(time.time() - t0, 1))
            return out
    tail = (proc.stderr or proc.stdout)[-800:]
    return dict(name=name, arch=arch, cls="CRASH", pcc=None, host=None,
                detail=f"process exited {proc.returncode}: {tail}")


def _line(r: Dict[str, Any]) -> str:
    pcc = f"{r['pcc']:.4f}" if r.get("pcc") is not None else "-"
    host = f"{100 * r['host']:.1f}%" if r.get("host") is not None else "-"
    detail = r.get("detail", "").splitlines()[0][:160] if r.get("detail") else ""
    return f"{r['name']:<16} {r['cls']:<17} {pcc:>7} {host:>6}  {detail}"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--filter", help="regex over model names")
    ap.add_argument("--arch", default="wh", choices=("wh", "gs"))
    ap.add_argument("--one", help="run one model in this process")
    ap.add_argument("--json", action="store_true", help="with --one: print the result as one JSON line")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=int, default=TIMEOUT_S)
    ap.add_argument("--batch", type=int, default=1, help="samples per push (default 1)")
    ap.add_argument("--device-embeddings", action="store_true", help="embedding out of cpu_fallback_ops")
    ap.add_argument("--chip-formats", action="store_true", help="default data formats (PCC only)")
    args = ap.parse_args(argv)
    if args.one:
        r = run_one(args.one, args.arch, verbose=args.verbose, batch=args.batch,
                    device_embeddings=args.device_embeddings, chip_formats=args.chip_formats)
        print(json.dumps(r) if args.json else _line(r) + ("\n" + r["detail"] if args.verbose else ""))
        return 0
    names = [n for n in MODELS if not args.filter or re.search(args.filter, n)]
    if args.list:
        print("\n".join(names))
        return 0
    print(f"{'model':<16} {'class':<17} {'PCC':>7} {'host':>6}  detail")
    counts: Dict[str, int] = {}
    for name in names:
        extra = ["--batch", str(args.batch)] + (["--device-embeddings"] if args.device_embeddings else []) + \
            (["--chip-formats"] if args.chip_formats else [])
        r = _subprocess(name, args.arch, args.timeout, extra)
        counts[r["cls"]] = counts.get(r["cls"], 0) + 1
        print(_line(r), flush=True)
    print("totals: " + ", ".join(f"{c} {counts[c]}" for c in (*CLASSES, "SKIP") if c in counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
