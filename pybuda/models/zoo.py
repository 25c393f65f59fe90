"""The model registry: `get_model` and `list_models`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

from pybuda.errors import ConfigError

from . import bert, gpt2, minilm, mobilenet, resnet, vit, whisper
from . import decoders, hf_vision, wav2vec2
from . import hrnet, inception, unet, vovnet
from ._common import check_positive
from .spec import ModelSpec


@dataclass(frozen=True)
class ModelEntry:
    """One zoo model: its variants (first = smallest), aliases, tasks (first = default) and size argument."""

    name: str
    variants: Tuple[str, ...]
    tasks: Tuple[str, ...]
    #: "seq_len" (text, audio frames) or "image_size" (vision): the size argument the builder takes.
    size_arg: str
    builder: Callable[..., ModelSpec]
    #: Other names for variants; every model answers to "base" (the default of `get_model`).
    aliases: Dict[str, str] = field(default_factory=dict)


_ENTRIES: Dict[str, ModelEntry] = {e.name: e for e in (
    ModelEntry("bert", ("tiny", "base", "large"), bert.TASKS, "seq_len", bert.build),
    ModelEntry("gpt2", ("tiny", "small"), gpt2.TASKS, "seq_len", gpt2.build, {"base": "small"}),
    ModelEntry("vit", ("tiny", "base"), vit.TASKS, "image_size", vit.build),
    ModelEntry("resnet", ("tiny", "resnet50", "resnet50_v1"), resnet.TASKS, "image_size", resnet.build,
               {"base": "resnet50", "50": "resnet50", "v1": "resnet50_v1"}),
    ModelEntry("mobilenet_v1", ("tiny", "base"), mobilenet.TASKS, "image_size", mobilenet.build_v1,
               {"1.0_224": "base"}),
    ModelEntry("mobilenet_v2", ("tiny", "base"), mobilenet.TASKS, "image_size", mobilenet.build_v2,
               {"1.0_224": "base"}),
    ModelEntry("whisper", ("mini", "tiny", "base"), whisper.TASKS, "seq_len", whisper.build),
    ModelEntry("minilm", ("l6_v2",), minilm.TASKS, "seq_len", minilm.build, {"base": "l6_v2"}),
    # Small configs of transformers models (issue #12); "base" is the mini config until full sizes are added.
    ModelEntry("llama", ("mini",), decoders.TASKS, "seq_len", decoders.build_llama, {"base": "mini"}),
    ModelEntry("opt", ("mini",), decoders.TASKS, "seq_len", decoders.build_opt, {"base": "mini"}),
    ModelEntry("gpt_neox", ("mini",), decoders.TASKS, "seq_len", decoders.build_gpt_neox, {"base": "mini"}),
    ModelEntry("swin", ("mini",), hf_vision.TASKS, "image_size", hf_vision.build_swin, {"base": "mini"}),
    ModelEntry("mobilevit", ("mini",), hf_vision.TASKS, "image_size", hf_vision.build_mobilevit, {"base": "mini"}),
    ModelEntry("convnext", ("mini",), hf_vision.TASKS, "image_size", hf_vision.build_convnext, {"base": "mini"}),
    ModelEntry("wav2vec2", ("mini",), wav2vec2.TASKS, "seq_len", wav2vec2.build, {"base": "mini"}),
    ModelEntry("vovnet_v2", ("tiny", "39"), vovnet.TASKS, "image_size", vovnet.build, {"base": "39"}),
    ModelEntry("inception_v4", ("tiny", "base"), inception.TASKS, "image_size", inception.build),
    ModelEntry("hrnet", ("tiny", "w64"), hrnet.TASKS, "image_size", hrnet.build, {"base": "w64", "v2_w64": "w64"}),
    ModelEntry("unet", ("tiny", "base"), unet.TASKS, "image_size", unet.build),
)}


def list_models() -> Dict[str, Tuple[str, ...]]:
    """Every zoo model name mapped to its variants, smallest first.

    For example ``{"bert": ("tiny", "base", "large"), "gpt2": ("tiny", "small"), ...}``; every model also
    answers to ``variant="base"`` (see :class:`ModelEntry` aliases).
    """
    return {name: entry.variants for name, entry in _ENTRIES.items()}


def model_entry(name: str) -> ModelEntry:
    """The registry entry of model ``name`` (variants, tasks, size argument); :class:`ConfigError` if unknown."""
    entry = _ENTRIES.get(name)
    if entry is None:
        raise ConfigError(f"unknown model '{name}'; models are {sorted(_ENTRIES)}")
    return entry


def get_model(name: str, variant: str = "base", microbatch: int = 1, seq_len: Optional[int] = None,
              image_size: Optional[int] = None, **kw: Any) -> ModelSpec:
    """Build zoo model ``name``/``variant`` with seeded random weights, in eval mode, and example inputs.

    ``minilm`` is the exception: it has the real all-MiniLM-L6-v2 weights and real example sentences.

    ``microbatch`` is the leading dimension of the example inputs. ``seq_len`` applies to text models
    (tokens; for BERT's encoder task the hidden-state length) and Whisper (mel frames); ``image_size`` to
    vision models. Extra keywords: ``seed`` (default 0; same seed -> identical weights and inputs),
    ``task`` (``bert``: "encoder" (default) or "text_classification"; ``minilm``: "sentence_embedding"
    (default) or "encoder"), and any field of the model's transformers config (``num_labels=5``,
    ``num_hidden_layers=4``, ...) to override the variant.
    Raises :class:`pybuda.errors.ConfigError` for unknown names, variants, tasks or options.
    """
    entry = model_entry(name)
    resolved = entry.aliases.get(variant, variant)
    if resolved not in entry.variants:
        raise ConfigError(f"model '{name}' has no variant '{variant}'; variants are {list(entry.variants)}")
    check_positive("microbatch", microbatch, name)
    check_positive("seq_len", seq_len, name)
    check_positive("image_size", image_size, name)
    if entry.size_arg == "seq_len" and image_size is not None:
        raise ConfigError(f"model '{name}' takes seq_len, not image_size")
    if entry.size_arg == "image_size" and seq_len is not None:
        raise ConfigError(f"model '{name}' takes image_size, not seq_len")
    seed = kw.pop("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"model '{name}': seed must be an int, got {seed!r}")
    task = kw.pop("task", None)
    size = seq_len if entry.size_arg == "seq_len" else image_size
    return entry.builder(resolved, microbatch, size, task, seed, dict(kw))
