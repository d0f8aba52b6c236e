"""The limit: hand-written GLSL compute shaders (benchmarks/limit/*.comp), compiled by glslangValidator, checked
by spirv-val and run through spvad's own Vulkan RHI on spvad's device, in the same process as spvad's kernels:
what the same work costs without a compiler in between. Each workload's `prepare_limit` uses `Shader`."""
import functools
import os
import shutil
import struct
import subprocess
import tempfile

import numpy as np

from .common import init_spvad

SOURCES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "limit")
TARGET = "vulkan1.1"
TOOLS = {"glslangValidator": "glslang-tools", "spirv-val": "spirv-tools"}
_owned = []     # the buffers and pipelines of the current workload, freed by release()


def missing_tools():
    """None when the shader tools are on PATH, else what is missing (and its Debian package)."""
    missing = [f"{tool} (Debian {pkg})" for tool, pkg in TOOLS.items() if shutil.which(tool) is None]
    return f"not found: {', '.join(missing)}" if missing else None


def compile_glsl(name, defines=None):
    """SPIR-V bytes of benchmarks/limit/<name>.comp, with `defines` as -D macros; spirv-val must accept them."""
    src = os.path.join(SOURCES, f"{name}.comp")
    with tempfile.TemporaryDirectory(prefix="limit-") as tmp:
        out = os.path.join(tmp, f"{name}.spv")
        macros = [f"-D{k}=({v!r})" for k, v in (defines or {}).items()]
        for cmd in (["glslangValidator", "-V", "--target-env", TARGET, *macros, "-o", out, src],
                    ["spirv-val", "--target-env", TARGET, out]):
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"{cmd[0]} failed on {name}.comp: {(p.stdout + p.stderr).strip()}")
        with open(out, "rb") as f:
            return f.read()


def device():
    """spvad's current Vulkan RHI device (started when there is none: `--systems limit` alone). The runtime is
    not re-initialised when it exists, since that would free the arrays spvad's prepared operations hold."""
    from spvad import runtime
    rt = runtime.current()
    if rt is None or rt.backend != "vulkan":
        init_spvad()
        rt = runtime.get()
    return rt.device


def buffer(dev, nbytes):
    """A zeroed device buffer of `nbytes` bytes."""
    _owned.append(dev.create_buffer(nbytes))
    return _owned[-1]


def upload(dev, array):
    """A device buffer holding `array` (float32 or int32)."""
    array = np.ascontiguousarray(array)
    buf = buffer(dev, max(array.nbytes, 4))
    buf.view(array.dtype)[:array.size] = array.ravel()
    return buf


def release():
    """Free what the workload's hand-written kernels held (the RHI frees nothing by itself before it closes)."""
    while _owned:
        _owned.pop().release()


def read(buf, dtype, count):
    """The first `count` elements of a buffer (after a sync)."""
    return buf.view(dtype)[:count].copy()


class Shader:
    """One hand-written compute shader on `dev`: `local_size_x_id = 0` is set to `local_size` (the device's
    preferred workgroup size by default, as spvad uses), the push constants are packed with `push_format`
    (struct syntax) and a launch of n threads folds its workgroups into 2-D past the device's x limit (the
    shaders of large launches compute their index as `gl_GlobalInvocationID.y * gl_NumWorkGroups.x *
    gl_WorkGroupSize.x + gl_GlobalInvocationID.x`)."""

    def __init__(self, dev, name, num_buffers, push_format="", local_size=None, spec=None, defines=None):
        self.dev, self.name = dev, name
        self.local = local_size or dev.info.get("preferred_local_size", 128)
        self.push = struct.Struct("<" + push_format)
        self.pipeline = dev.create_pipeline(compile_glsl(name, defines), name=f"limit/{name}",
                                            num_buffers=num_buffers, push_constant_size=self.push.size,
                                            spec_constants={0: self.local, **(spec or {})})
        _owned.append(self.pipeline)

    def dispatch(self, buffers, n, *push):
        """(pipeline, buffers, push constants, groups) of one launch of n threads: what Device.launch takes,
        and a row of Device.record_batch."""
        groups = -(-n // self.local)
        gx = min(groups, self.dev.info["limits"]["max_workgroup_count"][0])
        return self.pipeline, list(buffers), self.push.pack(*push), (gx, -(-groups // gx), 1)

    def launcher(self, buffers, n, *push):
        """A no-argument callable that records one launch of n threads (everything precomputed)."""
        return functools.partial(self.dev.launch, *self.dispatch(buffers, n, *push))

    def launch(self, buffers, n, *push):
        self.launcher(buffers, n, *push)()
