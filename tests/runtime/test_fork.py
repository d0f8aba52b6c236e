"""A process that forks after sp.init() (multiprocessing, torch's DataLoader workers): the child never touches the
parent's device. It exits at once, refuses the parent's arrays with a clear error, and runs kernels on a runtime
of its own. Each scenario runs in a fresh interpreter (never a fork of pytest), with a timeout: a hang fails."""
import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent('''
    import os, sys, time
    import numpy as np
    import spvad as sp

    @sp.kernel
    def affine(x: sp.Array, y: sp.Array, a: float):
        for i in range(x.shape[0]):
            y[i] = a * x[i] + 1.0

    sp.init()
    x = sp.from_numpy(np.arange(8, dtype=np.float32))
    y = sp.ndarray(sp.f32, (8,))
    affine(x, y, 2.0)
    assert np.array_equal(y.to_numpy(), 2 * np.arange(8) + 1)
''')


def run(tmp_path, body, timeout=120):
    script = tmp_path / "scenario.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_child_that_never_uses_spvad_exits_at_once(tmp_path):
    out = run(tmp_path, '''
        t = time.time()
        pid = os.fork()
        if pid == 0:
            sys.exit(3)   # a normal exit: atexit handlers run in the child
        _, status = os.waitpid(pid, 0)
        print("CHILD", os.waitstatus_to_exitcode(status), time.time() - t)
        affine(x, y, 3.0)   # the parent's runtime is untouched
        assert np.array_equal(y.to_numpy(), 3 * np.arange(8) + 1)
    ''')
    code, seconds = out.split()[1:3]
    assert code == "3" and float(seconds) < 20


@pytest.mark.parametrize("backend", ["vulkan", "interp"])
def test_a_child_refuses_the_parents_arrays_and_runs_its_own(tmp_path, backend):
    out = run(tmp_path, f'''
        sp.init(backend="{backend}")
        x = sp.from_numpy(np.arange(8, dtype=np.float32))
        y = sp.ndarray(sp.f32, (8,))
        affine(x, y, 2.0)
        y.to_numpy()
        pid = os.fork()
        if pid == 0:
            try:
                y.to_numpy()
                sys.exit(10)
            except sp.DeviceError as e:
                assert "os.fork()" in str(e), e
            try:
                affine(x, y, 2.0)
                sys.exit(11)
            except sp.ArgumentError as e:
                assert "parent process before os.fork()" in str(e), e
            sp.init(backend="{backend}")   # the child's own runtime
            a = sp.from_numpy(np.linspace(-1, 1, 8).astype(np.float32))
            b = sp.ndarray(sp.f32, (8,))
            affine(a, b, -0.5)
            ok = np.allclose(b.to_numpy(), -0.5 * np.linspace(-1, 1, 8) + 1, rtol=1e-6)
            sys.exit(0 if ok else 12)
        _, status = os.waitpid(pid, 0)
        print("CHILD", os.waitstatus_to_exitcode(status))
        affine(x, y, 4.0)
        assert np.array_equal(y.to_numpy(), 4 * np.arange(8) + 1)
    ''')
    assert out.split()[1] == "0", out


def test_a_fork_pool_runs_kernels_in_its_workers(tmp_path):
    out = run(tmp_path, '''
        import multiprocessing as mp

        def work(k):   # a worker opens its own runtime at its first launch
            a = sp.from_numpy(np.full(16, k, np.float32))
            b = sp.ndarray(sp.f32, (16,))
            affine(a, b, 0.5)
            return float(b.to_numpy().astype(np.float64).sum())

        with mp.get_context("fork").Pool(2) as pool:
            got = pool.map(work, range(6))
        assert got == [16 * (0.5 * k + 1) for k in range(6)], got
        affine(x, y, 2.0)
        assert np.array_equal(y.to_numpy(), 2 * np.arange(8) + 1)
        print("POOL", got)
    ''')
    assert "POOL" in out


def test_a_dataloader_with_forked_workers_feeds_a_training_loop(tmp_path):
    """torch's DataLoader forks its workers after spvad opened the device; the loop trains with a Tape and
    ends at the parameters of the same loop in numpy float64."""
    pytest.importorskip("torch")
    out = run(tmp_path, '''
        import torch
        from torch.utils.data import DataLoader, Dataset

        N, BATCH, LR = 64, 8, 0.05
        rng = np.random.default_rng(7)
        inputs = rng.uniform(-1, 1, (N, 4)).astype(np.float32)
        targets = (inputs @ np.array([0.5, -1.0, 2.0, 0.25]) + 0.3).astype(np.float32)

        class Samples(Dataset):
            def __len__(self):
                return N

            def __getitem__(self, k):   # runs in a forked worker
                return inputs[k], targets[k]

        @sp.kernel
        def squared_error(xb: sp.Array, tb: sp.Array, w: sp.Array, loss: sp.Array):
            for i in range(xb.shape[0]):
                p = w[4]
                for j in range(4):
                    p += w[j] * xb[i, j]
                loss[None] += (p - tb[i]) ** 2

        w = sp.from_numpy(np.zeros(5, np.float32), needs_grad=True)
        loss = sp.ndarray(sp.f32, (), needs_grad=True)
        w_ref = np.zeros(5)
        loader = DataLoader(Samples(), batch_size=BATCH, shuffle=False, num_workers=2,
                            multiprocessing_context="fork")
        for epoch in range(3):
            for xb, tb in loader:
                xs, ts = xb.numpy(), tb.numpy()
                with sp.Tape(loss=loss):
                    squared_error(sp.from_numpy(xs), sp.from_numpy(ts), w, loss)
                w.from_numpy(w.to_numpy() - LR * w.grad.to_numpy())
                r = xs.astype(np.float64) @ w_ref[:4] + w_ref[4] - ts
                w_ref -= LR * np.concatenate([2 * r @ xs.astype(np.float64), [2 * r.sum()]])
        assert np.allclose(w.to_numpy(), w_ref, rtol=1e-4, atol=1e-5), (w.to_numpy(), w_ref)
        print("TRAINED", w.to_numpy())
    ''', timeout=300)
    assert "TRAINED" in out
