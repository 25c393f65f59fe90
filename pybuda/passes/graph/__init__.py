"""Passes on the framework-level ``ir.Graph``: decomposition, consteval, TM optimisation, conv prestride,
channel-last regions and the per-sample (microbatch) rewrite."""
