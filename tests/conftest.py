"""Suite-wide fixtures: a fresh global compiler config per test, and an opt-out for slow tests."""

import os
import sys

import pytest


def pytest_collection_modifyitems(config, items):
    # Slow model tests run in CI too (DESIGN.md); PYBUDA_SKIP_SLOW=1 skips them for quick local runs.
    if os.environ.get("PYBUDA_SKIP_SLOW") == "1":
        skip = pytest.mark.skip(reason="PYBUDA_SKIP_SLOW=1")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_compiler_config():
    from pybuda.config import _clear_global_compiler_config

    _clear_global_compiler_config()
    yield
    _clear_global_compiler_config()


@pytest.fixture(autouse=True)
def _no_devices_left_behind():
    # Devices register globally (creation order is pipeline order), so a test that leaves one behind
    # would silently join the next test's pipeline on the same worker. Reset after every test that
    # touched the runtime.
    yield
    runtime = sys.modules.get("pybuda.runtime")
    if runtime is not None:
        runtime.shutdown()
        runtime.pybuda_reset()
