"""Thin wrappers around the Khronos command-line tools: spirv-val, spirv-dis, spirv-as and spirv-cross.

Modules travel through stdin/stdout pipes (no temporary files, no shell); executables are found on PATH.
subprocess and shutil are imported on first use: outside the tests and debug builds no tool runs, and they
took ~5 ms of every `import spvad`."""
from ..errors import SpirvValidationError, SpvadError

PACKAGES = {  # executable -> (Debian package, Homebrew formula)
    "spirv-val": ("spirv-tools", "spirv-tools"),
    "spirv-dis": ("spirv-tools", "spirv-tools"),
    "spirv-as": ("spirv-tools", "spirv-tools"),
    "spirv-cross": ("spirv-cross", "spirv-cross"),
}
_found = {}


def find_tool(name):
    """Absolute path of a Khronos tool on PATH, or SpvadError saying which package provides it."""
    import shutil
    path = _found.get(name) or shutil.which(name)
    if path is None:
        debian, brew = PACKAGES[name]
        raise SpvadError(f"{name} not found on PATH: install it (Debian/Ubuntu: `apt install {debian}`, "
                         f"macOS: `brew install {brew}`)")
    _found[name] = path
    return path


def _run(name, args, data):
    """Run a tool with `data` (bytes) on stdin; return (returncode, stdout bytes, stderr text)."""
    import subprocess
    proc = subprocess.run([find_tool(name), *args], input=data, capture_output=True)
    return proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace")


def validate(spirv_bytes, kernel_name="?", target_env="vulkan1.1", extra_args=()):
    """Run spirv-val; raise SpirvValidationError naming the kernel and quoting spirv-val in full."""
    rc, out, err = _run("spirv-val", ["--target-env", target_env, *extra_args, "-"], bytes(spirv_bytes))
    if rc != 0:
        message = (out.decode("utf-8", "replace") + err).strip()
        raise SpirvValidationError(f"spirv-val ({target_env}) rejected the SPIR-V of kernel "
                                   f"{kernel_name!r}:\n{message}")


def disassemble(spirv_bytes, extra_args=()):
    """Readable SPIR-V assembly (spirv-dis, friendly names, no colour)."""
    rc, out, err = _run("spirv-dis", ["--no-color", *extra_args, "-"], bytes(spirv_bytes))
    if rc != 0:
        raise SpvadError(f"spirv-dis failed:\n{err.strip()}")
    return out.decode("utf-8")


def assemble(text, target_env="vulkan1.1", extra_args=()):
    """SPIR-V binary from assembly text (spirv-as)."""
    args = ["--target-env", target_env, *extra_args, "-o", "-", "-"]
    rc, out, err = _run("spirv-as", args, text.encode("utf-8"))
    if rc != 0:
        raise SpvadError(f"spirv-as failed:\n{err.strip()}")
    return out


def to_msl(spirv_bytes, msl_version=20100, extra_args=()):
    """Metal Shading Language source translated by SPIRV-Cross."""
    args = ["--msl", "--msl-version", str(msl_version), *extra_args, "-"]
    rc, out, err = _run("spirv-cross", args, bytes(spirv_bytes))
    if rc != 0:
        raise SpvadError(f"spirv-cross --msl failed:\n{(err or out.decode('utf-8', 'replace')).strip()}")
    return out.decode("utf-8")
