"""The compiler passes, one module per pass; :mod:`pybuda.passes.pipeline` lists the compile stages.

Entry points: :func:`pybuda.passes.pipeline.compile_graph` (an ``ir.Graph``) and
:func:`pybuda.passes.pipeline.pybuda_compile` (TT-Buda's signature, for modules).
"""
