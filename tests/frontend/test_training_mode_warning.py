"""The capture's training-mode warning: only for a model whose forward can read its ``training`` flag."""

import logging

import torch

from pybuda.frontend.torch import _mode_matters


class _Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()


class _FunctionalDropout(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.dropout(x, 0.1, training=self.training)


def test_plain_modules_do_not_depend_on_the_mode():
    assert not _mode_matters(_Plain())


def test_dropout_batch_norm_and_code_reading_training_do():
    assert _mode_matters(torch.nn.Sequential(_Plain(), torch.nn.Dropout(0.1)))
    assert _mode_matters(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)))
    assert _mode_matters(_FunctionalDropout())


def test_capture_warns_only_when_the_mode_matters(caplog):
    import pybuda
    from pybuda.frontend.torch import capture

    with caplog.at_level(logging.WARNING, logger="pybuda.frontend.torch"):
        capture(pybuda.PyTorchModule("plain", _Plain()), (torch.randn(1, 4),))
    assert "training mode" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="pybuda.frontend.torch"):
        capture(pybuda.PyTorchModule("fdrop", _FunctionalDropout()), (torch.randn(1, 4),))
    assert "training mode" in caplog.text
