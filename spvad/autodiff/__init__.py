"""Derivatives as IR transforms: the local partials table (rules.py), activity, reverse mode with adstacks
(reverse.py, adstack.py), forward mode (dual.py), in-kernel derivatives, loop exits, store-or-recompute, and
the data-access validation of gradients (validation.py).

May import: ir, types, errors. Never spirv, rhi or anything that runs code: it works on IR only."""
