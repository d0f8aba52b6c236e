"""`python -m spvad info` and `python -m spvad dump FILE.py:KERNEL` as a user runs them."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args):
    env = dict(os.environ)
    env.pop("SPVAD_VALIDATION", None)   # a separate process: keep its output free of layer chatter
    out = subprocess.run([sys.executable, "-m", "spvad", *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_info_prints_the_device_as_json():
    info = json.loads(run_cli("info"))
    assert info["backend"] == "vulkan" and info["name"]
    assert {"float64", "int64"} <= set(info["features"])


def test_dump_prints_ir_gradient_ir_spirv_and_the_verdict():
    out = run_cli("dump", "examples/demo.py:integrate")
    assert "==== primal IR ====" in out and "==== reverse IR ====" in out
    assert "OpEntryPoint GLCompute" in out
    assert "adstack" in out                 # the gradient of the dynamic loop uses an adstack
    assert "spirv-val: OK" in out and "FAILED" not in out


def test_dump_with_explicit_argument_types():
    out = run_cli("dump", "examples/demo.py:total", "--args", "f32:1,f32:0")
    assert "kernel total" in out and "spirv-val: OK" in out
