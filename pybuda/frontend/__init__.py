"""Frontends: framework models -> pybuda ``ir.Graph``.

- :mod:`pybuda.frontend.torch`: PyTorch via ``torch.export`` (:func:`~pybuda.frontend.torch.capture`,
  :func:`~pybuda.frontend.torch.split_for_devices`), built from :mod:`.fx_export` (export and its rewrites),
  :mod:`.fx_program` (constant folding), :mod:`.aten_map` (ATen -> registry ops) and :mod:`.fallback` (CPU
  pre/post split).
- :mod:`pybuda.frontend.torch_compile`: the ``torch.compile(..., backend="pybuda")`` backend.

Submodules are imported on use, so ``import pybuda`` does not pay for ``torch.export``.
"""
