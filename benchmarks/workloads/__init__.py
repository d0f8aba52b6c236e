"""The peer-benchmark workloads: one module per workload, each with its spvad, Taichi and Quadrants versions
and a float64 numpy reference; run them with benchmarks/peers.py."""
