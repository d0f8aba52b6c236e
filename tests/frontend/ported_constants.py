"""Constants of a ported program's own module (`import consts; consts.G`), read by tests/frontend/
test_ported_syntax.py's kernels as `module.name`."""
import numpy as np

G = np.array([0.3, -9.8, 0.7], dtype=np.float32)                      # a vector constant
M = np.array([[0.9, 0.1, -0.2], [0.0, 1.1, 0.3], [0.2, -0.4, 0.8]], dtype=np.float32)   # a matrix constant
WEIGHTS = (0.5, -1.25, 2.0)                                           # a tuple of numbers
