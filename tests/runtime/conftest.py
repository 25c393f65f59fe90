"""Fixtures for runtime tests: a clean pybuda state around every test, and a hard time limit.

Every test that starts a pipeline relies on ``pybuda_reset`` here to stop it. The watchdog aborts the
whole run if one test wedges (``PYBUDA_TEST_TIME_LIMIT_S``, default 120 s), so a runtime bug can never
hang the suite; every thread's stack is written to ``runtime_watchdog.log`` in pytest's temp dir.
"""

import faulthandler
import logging
import os

import pytest

import pybuda

TEST_TIME_LIMIT_S = int(os.environ.get("PYBUDA_TEST_TIME_LIMIT_S", "120"))


@pytest.fixture(scope="session")
def _build_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tt_build"))


@pytest.fixture(scope="session")
def _watchdog_file(tmp_path_factory):
    with open(tmp_path_factory.getbasetemp() / "runtime_watchdog.log", "w") as f:
        yield f


@pytest.fixture(autouse=True)
def clean_runtime(monkeypatch, _build_dir, _watchdog_file):
    monkeypatch.setenv("PYBUDA_BUILD_DIR", _build_dir)  # compile artifacts stay out of the work tree
    for var in ("PYBUDA_FORCE_THREADS", "PYBUDA_FORCE_CONCURRENT", "PYBUDA_DEVMODE",
                "GOLDEN_WORMHOLE_B0", "PYBUDA_GOLDEN_BLACKHOLE"):
        monkeypatch.delenv(var, raising=False)
    # CPU-only pipelines would default to one spawned process per device (seconds each on a loaded
    # machine); tests opt into concurrency with the fixtures below.
    monkeypatch.setenv("PYBUDA_FORCE_SEQUENTIAL", "1")
    # These tests check the runtime's plumbing against exact float32 results, so the golden backend runs
    # in plain float32 here; the chip's numerics are tested in tests/backend, tests/golden and the seed
    # example tests.
    monkeypatch.setenv("PYBUDA_GOLDEN_FAST", "1")
    pybuda.pybuda_reset()
    faulthandler.dump_traceback_later(TEST_TIME_LIMIT_S, exit=True, file=_watchdog_file)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        pybuda.pybuda_reset()


@pytest.fixture
def threads_mode(monkeypatch):
    """Concurrent mode with one thread per device (also for pipelines holding a simulated TTDevice)."""
    monkeypatch.delenv("PYBUDA_FORCE_SEQUENTIAL", raising=False)
    monkeypatch.setenv("PYBUDA_FORCE_CONCURRENT", "1")
    monkeypatch.setenv("PYBUDA_FORCE_THREADS", "1")


@pytest.fixture
def processes_mode(monkeypatch):
    """Concurrent mode with one spawned process per device (TT-Buda's default)."""
    monkeypatch.delenv("PYBUDA_FORCE_SEQUENTIAL", raising=False)
    monkeypatch.setenv("PYBUDA_FORCE_CONCURRENT", "1")


@pytest.fixture
def quiet_logs(caplog):
    caplog.set_level(logging.ERROR, logger="pybuda")
    return caplog
