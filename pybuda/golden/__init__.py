"""The golden device: the simulated chip's numerics, bit by bit.

:mod:`~pybuda.golden.formats` (every data format and the math-fidelity model), :mod:`~pybuda.golden.tiles`
(32x32 tiles of 16x16 faces), :mod:`~pybuda.golden.kernels` (what each netlist op and TM computes),
:mod:`~pybuda.golden.device` (:class:`GoldenDevice`: queues, programs, executes a parsed netlist) and
:mod:`~pybuda.golden.executor` (the runtime's executor: host I/O record + netlist + tensors).
"""
