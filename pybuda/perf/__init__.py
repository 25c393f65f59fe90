"""The performance model: how fast a placed netlist would run on the real card.

:mod:`~pybuda.perf.cost` holds the per-op cycle formulas (the balancer reads them too, without loading
the rest of the model); :mod:`~pybuda.perf.model` is the entry point (:func:`~pybuda.perf.model.estimate`),
walking programs (:mod:`~pybuda.perf.program`) with the estimator (:mod:`~pybuda.perf.estimator`,
:mod:`~pybuda.perf.pipes`) under :mod:`~pybuda.perf.config`'s parameters into :mod:`~pybuda.perf.types`'
results, written by :mod:`~pybuda.perf.report`.
"""
