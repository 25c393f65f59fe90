"""Lowering: the per-sample ``ir.Graph`` becomes a lowered graph of netlist ops on 32x32 tiles.

:mod:`~pybuda.passes.lower.to_tiles` is the pass; its mixins lower data movement, reductions and
convolutions; :mod:`~pybuda.passes.lower.pickers` builds the constant tensors it needs and
:mod:`~pybuda.passes.lower.capabilities` answers which registry ops it can express."""
