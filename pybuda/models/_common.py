"""Helpers shared by the model-zoo builders: dependency checks, seeding, config overrides, inputs."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import torch

from pybuda.errors import ConfigError, PybudaError


class ModelDependencyError(PybudaError, ImportError):
    """An optional package needed by a model (transformers, sentence-transformers, ...) is not installed."""


# Substrings of config keys that hold a dropout probability (BERT/ViT `*_dropout_prob`, GPT-2 `*_pdrop`,
# Whisper `*dropout` and `*layerdrop`, MobileNet `classifier_dropout_prob`).
_DROPOUT_KEYS = ("dropout", "pdrop", "layerdrop")


def require(package: str, extra: str = "models"):
    """Import and return ``package``, or raise :class:`ModelDependencyError` naming the pip extra."""
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise ModelDependencyError(
            f"the model zoo needs '{package}', which is not installed; install it with "
            f"`pip install pybuda[{extra}]`") from exc


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch's CPU RNG for the block and restore the caller's RNG state afterwards.

    transformers initialises weights through ``torch.nn.init`` on the global generator, so the only way to
    make builds deterministic without disturbing the caller is to fork the global RNG.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def make_config(config_cls: type, defaults: Mapping[str, Any], overrides: Mapping[str, Any], model: str,
                transformer: bool = True):
    """Build ``config_cls(**defaults, **overrides)`` for inference.

    Unknown override keys raise :class:`ConfigError` (transformers configs silently accept anything, which
    would hide typos). Every dropout probability the caller did not set explicitly is zeroed, and transformer
    models get the eager attention implementation so graphs capture without SDPA kernels.
    """
    probe = config_cls()
    unknown = sorted(k for k in overrides if not hasattr(probe, k))
    if unknown:
        raise ConfigError(f"model '{model}': unknown option(s) {unknown}; options are fields of "
                          f"{config_cls.__name__}")
    kwargs: Dict[str, Any] = {**defaults, **overrides}
    if transformer:
        kwargs.setdefault("attn_implementation", "eager")
    config = config_cls(**kwargs)
    for key, value in config.to_dict().items():
        if key not in overrides and isinstance(value, float) and any(s in key for s in _DROPOUT_KEYS):
            setattr(config, key, 0.0)
    return config


def finish(module: torch.nn.Module) -> torch.nn.Module:
    """Put a freshly built module in eval mode (dropout and batch-norm statistics frozen)."""
    return module.eval()


def input_generator(seed: int) -> torch.Generator:
    """A private generator for example inputs, so inputs do not depend on how many weights were drawn."""
    return torch.Generator().manual_seed(seed + 1_000_003)


def random_token_ids(gen: torch.Generator, microbatch: int, seq_len: int, vocab_size: int) -> torch.Tensor:
    """Token ids in ``[0, vocab_size)``, shape ``[microbatch, seq_len]``, dtype int64."""
    return torch.randint(0, vocab_size, (microbatch, seq_len), generator=gen, dtype=torch.long)


def random_images(gen: torch.Generator, microbatch: int, image_size: int, channels: int = 3) -> torch.Tensor:
    """Normalised-image-like float32 pixels, shape ``[microbatch, channels, image_size, image_size]``."""
    return torch.randn((microbatch, channels, image_size, image_size), generator=gen)


def check_positive(name: str, value: Optional[int], model: str) -> None:
    """Raise :class:`ConfigError` unless ``value`` is None or a positive int."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigError(f"model '{model}': {name} must be a positive integer, got {value!r}")


def pick_task(task: Optional[str], tasks: Tuple[str, ...], model: str) -> str:
    """Resolve ``task`` (None = the first, default task) against the tasks a model supports."""
    if task is None:
        return tasks[0]
    if task not in tasks:
        raise ConfigError(f"model '{model}' has no task '{task}'; tasks are {list(tasks)}")
    return task
