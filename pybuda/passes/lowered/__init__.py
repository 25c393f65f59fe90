"""Passes on the lowered (tile) graph: matmul epilogue fusion, data formats and math fidelity, and
elementwise op fusion."""
