"""Helpers shared by the ONNX converter families."""

from __future__ import annotations

import torch

from pybuda.frontend.aten_builder import Unsupported
from pybuda.frontend.onnx.converter import NodeCtx

_F32 = torch.float32


def _float_out(ctx: NodeCtx, k: int = 0) -> torch.dtype:
    dt = ctx.out_dtype(k)
    if not dt.is_floating_point:
        raise Unsupported(f"{ctx.op_type} on {str(dt).replace('torch.', '')} data")
    return dt


