"""The interpreter backend: kernels run on the IR interpreter (spvad/ir/interp.py), the semantic oracle, with
the same launch interface as a device. Slow, for small sizes: tests of the passes without a driver."""
