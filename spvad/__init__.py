"""spvad: a small GPU autodiff compiler from Python kernels to SPIR-V, running on Vulkan (and Metal)."""
from .errors import (AdStackOverflowError, ArgumentError, AutodiffRuleError, CompileError, DeviceError,
                     PipelineCreationError, ReentryError, SpirvValidationError, SpvadError, ThreadCountError)
from .frontend.objects import data_oriented
from .kernel import func, kernel
from .batch import vmap
from .lang import *  # noqa: F401,F403 (lang.__all__: the names kernels call, the math functions included)
from .ndarray import copy, from_numpy, ndarray
from .runtime import device_info, init, reset, sync
from .launch.capture import capture
from .interop import from_dlpack, from_jax, from_torch, jax_function, torch_function
from .tape import FwdMode, Tape, clear_all_gradients, grad_for, grad_replaced, no_grad
from .types import Matrix, Vector, f32, f64, i32, mat2, mat3, mat4, u1, u32, vec2, vec3, vec4

__version__ = "0.1.0"
