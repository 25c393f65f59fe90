"""Fixtures for the JAX frontend tests; the helpers live in jax_helpers.py."""

from types import SimpleNamespace

import numpy as np
import pytest

from jax_helpers import assert_matches, check, jax_outputs


@pytest.fixture
def jfe():
    """JAX frontend helpers: ``check(fn, *inputs, params=, primitive=)``, ``matches``, ``jax_outputs``."""
    return SimpleNamespace(check=check, matches=assert_matches, jax_outputs=jax_outputs)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
