"""Fixtures of the compiler-pass tests (helpers live in pass_helpers.py)."""

import pytest

from pass_helpers import make_ctx


@pytest.fixture
def ctx():
    """A compile context for a Wormhole n150 with the default config."""
    return make_ctx()
