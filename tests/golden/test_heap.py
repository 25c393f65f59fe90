"""pybuda.golden.heap: glibc is asked to keep what golden runs free (mallopt), once per process, unless
PYBUDA_GOLDEN_KEEP_HEAP=0; the device build trims and then keeps."""

import subprocess
import sys
import textwrap

import pytest

from pybuda.golden import heap


class _FakeLibc:
    """Records mallopt/malloc_trim calls; ``accepts``: what mallopt returns (glibc: 1 on success)."""

    def __init__(self, accepts: int = 1):
        self.accepts, self.calls = accepts, []

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return self.accepts

    def malloc_trim(self, pad):
        self.calls.append(("trim", pad))
        return 1


@pytest.fixture
def fake_libc(monkeypatch):
    libc = _FakeLibc()
    monkeypatch.setattr(heap, "_glibc", lambda: libc)
    monkeypatch.setattr(heap, "_kept", False)
    monkeypatch.delenv("PYBUDA_GOLDEN_KEEP_HEAP", raising=False)
    return libc


def test_fixed_thresholds_are_set_once(fake_libc):
    assert heap.keep_freed_memory() is True
    assert fake_libc.calls == [(heap._M_MMAP_THRESHOLD, heap.MMAP_THRESHOLD_BYTES),
                               (heap._M_TRIM_THRESHOLD, heap.TRIM_THRESHOLD_BYTES)]
    assert heap.keep_freed_memory() is True
    assert len(fake_libc.calls) == 2  # the process keeps its setting: nothing asked again


@pytest.mark.parametrize("value", ["0", "off", "false"])
def test_the_environment_turns_it_off(fake_libc, monkeypatch, value):
    monkeypatch.setenv("PYBUDA_GOLDEN_KEEP_HEAP", value)
    assert heap.keep_freed_memory() is False
    assert fake_libc.calls == []


def test_a_refused_setting_is_reported_and_tried_again(fake_libc):
    fake_libc.accepts = 0
    assert heap.keep_freed_memory() is False
    fake_libc.accepts = 1
    assert heap.keep_freed_memory() is True


def test_without_glibc_nothing_is_called(monkeypatch):
    monkeypatch.setattr(heap, "_glibc", lambda: None)
    monkeypatch.setattr(heap, "_kept", False)
    assert heap.keep_freed_memory() is False
    heap.release_free_memory()  # a no-op, not an error


def test_the_real_libc_accepts_the_setting_in_a_fresh_process():
    # Process-wide, so checked in a child: on glibc both mallopt calls succeed; elsewhere nothing is set.
    code = textwrap.dedent("""
        from pybuda.golden import heap
        kept = heap.keep_freed_memory()
        print(kept, heap._glibc() is not None)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == out[1]  # kept exactly when the C library is glibc
