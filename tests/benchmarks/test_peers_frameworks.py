"""benchmarks/peers.py with the frameworks NVIDIA users run: on a machine without CUDA the CPU builds of jax and
torch time the integrator (their values and gradients checked against the float64 reference, as spvad's), and
`cuda` is reported UNAVAILABLE with the reason; the JSON and the markdown table are written."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = os.path.join(ROOT, "benchmarks", "peers.py")


def test_integrator_against_jax_torch_and_cuda(tmp_path):
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    out, md = tmp_path / "peers.json", tmp_path / "peers.md"
    p = subprocess.run([sys.executable, PEERS, "--systems", "spvad,jax,torch,cuda", "--only", "integrator", "--quick",
                        "--no-install", "--repeat", "1", "--json", str(out), "--markdown", str(md)],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert p.returncode == 0, p.stdout + p.stderr
    rows = json.loads(out.read_text())["results"]
    status = {(r["system"], r["op"]): r["status"] for r in rows}
    for system in ("spvad", "jax", "torch"):
        assert status[(system, "forward")] == "OK" and status[(system, "gradient")] == "OK", rows
    cuda = [r for r in rows if r["system"] == "cuda"]
    if cuda[0]["status"] == "UNAVAILABLE":          # no CuPy or no CUDA device here: the reason is given
        assert "cupy" in cuda[0]["detail"].lower() or "cuda" in cuda[0]["detail"].lower()
    table = md.read_text()
    assert "| integrator | gradient |" in table and "spvad/jax" in table


def test_gpu_sizes_and_systems():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import peers
    finally:
        sys.path.pop(0)
    from workloads import elementwise, integrator, mass_spring, mpm

    class Args:
        quick, gpu = False, True
    assert peers.workload_config(integrator, Args)["threads"] >= 1 << 20
    assert peers.workload_config(elementwise, Args)["n"] == 1 << 28
    assert set(peers.workload_config(mpm, Args)) == set(mpm.config(False))   # only keys the workload knows
    Args.gpu = False
    assert peers.workload_config(mass_spring, Args) == mass_spring.config(False)
    for system in ("jax", "torch", "torch-compile", "cuda"):
        assert peers.runs(system, integrator) and peers.runs(system, mass_spring)
    assert not peers.runs("cuda", mpm)
