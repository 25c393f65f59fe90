"""A host script whose device process is busy inside a module, for tests that signal the host.

Run as ``python busy_host.py`` with ``BUSY_HOST_STATE`` naming a folder. Once the pipeline runs, the
host writes ``pids`` there ("<device pid> <resource tracker pid or 0>"); the device writes ``busy``
when it starts a forward pass that lasts minutes. The host then blocks in ``output_queue.get()``.
"""

import multiprocessing
import os
import signal
import time

import torch

import pybuda

BUSY_S = 300


class Busy(torch.nn.Module):
    """Doubles its input; a positive input (not the compile sample) first keeps the device busy."""

    def forward(self, x):
        if x.sum() > 0:
            open(os.path.join(os.environ["BUSY_HOST_STATE"], "busy"), "w").close()
            time.sleep(BUSY_S)
        return x * 2


def main() -> None:
    """Start a one-device pipeline in a process, make the device busy, wait for its output."""
    from multiprocessing import resource_tracker

    # Ctrl-C as a script started from a shell gets it. An ignored or blocked SIGINT survives exec, so a test
    # process that inherited one (from whatever ran before it in the same worker) would pass it on, and
    # Python then never raises KeyboardInterrupt: the host would rightly not exit.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.default_int_handler)

    state = os.environ["BUSY_HOST_STATE"]
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("busy", Busy()))
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(-torch.ones(1, 4),))
    (child,) = multiprocessing.active_children()
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None) or 0
    with open(os.path.join(state, "pids.tmp"), "w") as f:
        f.write(f"{child.pid} {tracker}")
    os.replace(os.path.join(state, "pids.tmp"), os.path.join(state, "pids"))  # readers never see half a file
    cpu0.push_to_inputs(torch.ones(1, 4))
    pybuda.run_forward(1)
    q.get()


if __name__ == "__main__":
    main()
