"""JAX frontend: capture a JAX function or Flax linen module from its jaxpr into a pybuda ``ir.Graph``.

- :func:`capture` (:mod:`.capture`): trace with ``jax.make_jaxpr``, map ``lax`` primitives onto registry ops
  (:mod:`.primitives`), params become graph parameters named by their pytree path.
- :func:`to_jax`: a pybuda Tensor (or torch tensor) as a JAX array (``Tensor.to_framework("jax")``).

Importing this package does not import JAX; the functions do, and say which extra to install if it is
missing.
"""

from __future__ import annotations

from typing import Any

from pybuda.frontend.jax.capture import JaxCaptureResult, capture, parameter_names, to_jax_array, to_torch


def to_jax(tensor: Any) -> Any:
    """A pybuda Tensor, torch tensor or numpy array as a ``jax.Array`` (on JAX's default device).

    What ``Tensor.to_framework("jax")`` returns; bfloat16 stays bfloat16."""
    return to_jax_array(tensor)


__all__ = ["JaxCaptureResult", "capture", "parameter_names", "to_jax", "to_torch"]
