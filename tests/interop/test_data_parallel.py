"""Data-parallel training on torch's engine (examples/data_parallel.py): two processes started with
torch.distributed (gloo, 127.0.0.1 only), each with its own spvad runtime and half of the batch, train the
springs' parameters with DistributedDataParallel; both must end with the parameters of one process that
trains on the whole batch with plain torch in float64."""
import os
import pathlib
import runpy
import types

import pytest
import torch

PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "data_parallel.py"


@pytest.fixture(scope="module")
def ex():
    return types.SimpleNamespace(**runpy.run_path(str(PATH), run_name="data_parallel_example"))


@pytest.mark.parametrize("backend, epochs", [("vulkan", None), ("interp", 6)])   # the interpreter is slow
def test_two_processes_end_with_the_one_process_parameters(ex, backend, epochs, monkeypatch):
    monkeypatch.setenv("SPVAD_BACKEND", backend)   # the workers' runtimes
    epochs = epochs or ex.EPOCHS
    results = ex.train_data_parallel(world=2, epochs=epochs, timeout=300)
    ref_params, ref_loss = ex.train_reference(epochs)
    start_loss = ex.Springs(spvad=False)(*ex.make_batch()).item()
    assert ref_loss < start_loss / (100 if epochs == ex.EPOCHS else 2)   # the training does something
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert r["messages"] == [], r["messages"]
        assert r["params"] == results[0]["params"]   # DDP keeps the replicas equal
        torch.testing.assert_close(torch.tensor(r["params"]), torch.tensor(ref_params), rtol=1e-9, atol=1e-12)
    assert abs(sum(r["loss"] for r in results) / 2 - ref_loss) < 1e-9 * ref_loss
    assert os.environ.get("SPVAD_BACKEND") == backend
