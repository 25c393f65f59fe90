"""The compiler passes, one module per pass; :mod:`pybuda.passes.pipeline` lists the compile stages.

Entry points are in :mod:`pybuda.compile`: :func:`pybuda.compile.compile_graph` (an ``ir.Graph``) and
:func:`pybuda.compile.pybuda_compile` (TT-Buda's signature, for modules).
"""
