"""A machine with the Vulkan loader but no driver: sp.init() raises a DeviceError that says so, what to install
and that the interpreter backend runs without one; the same process then runs kernels on the interpreter.
No driver is simulated with the loader's variables (VK_DRIVER_FILES / VK_ICD_FILENAMES naming no file)."""
import json
import os
import subprocess
import sys

import pytest

import spvad as sp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(sp.__file__)))   # the spvad under test, for the child

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Debian/Ubuntu hint: Linux")

CHILD = '''
import json
import numpy as np
import spvad as sp

@sp.kernel
def affine(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * 2.0 + 1.0

out = {}
try:
    sp.init()
except Exception as exc:
    out["error"] = {"class": type(exc).__name__, "device_error": isinstance(exc, sp.DeviceError),
                    "message": str(exc)}
sp.init(backend="interp")
x, y = sp.from_numpy(np.arange(4, dtype=np.float32)), sp.ndarray(sp.f32, (4,))
affine(x, y)
out["result"] = [float(v) for v in y.to_numpy()]
print("RESULT", json.dumps(out))
'''


def test_no_driver_says_what_to_install_and_the_interpreter_still_runs(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    missing = str(tmp_path / "no-such-driver.json")
    env = dict(os.environ, PYTHONPATH=ROOT, SPVAD_CACHE_DIR=str(tmp_path / "cache"),
               VK_DRIVER_FILES=missing, VK_ICD_FILENAMES=missing,
               XDG_RUNTIME_DIR=os.environ.get("XDG_RUNTIME_DIR", "/tmp"))
    for name in ("SPVAD_BACKEND", "SPVAD_DEVICE", "VK_ADD_DRIVER_FILES"):   # they would pick another device
        env.pop(name, None)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"child failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}"
    out = json.loads(lines[-1][len("RESULT "):])
    error = out.get("error")
    assert error is not None, "sp.init() found a Vulkan device with no driver installed"
    assert error["class"] == "DeviceError" and error["device_error"], error
    message = error["message"]
    assert message.startswith("no Vulkan driver found"), message
    assert "apt-get install mesa-vulkan-drivers" in message and "lavapipe" in message, message
    assert "GPU vendor's" in message and 'sp.init(backend="interp")' in message, message
    assert out["result"] == [1.0, 3.0, 5.0, 7.0]
