"""examples/electric.py (DiffTaichi's electric, ported), small: a rollout's loss and the gradients of the network's
weights under sp.Tape against the same algorithm in float64 numpy (central differences along random
directions), on the second rollout too (the network then reads the first rollout's states, which the second
overwrites), and gradient steps lower the loss."""
import importlib.util
import pathlib

import numpy as np
import pytest

import spvad as sp

PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "electric.py"
PARAMS = ("weight1", "bias1", "weight2", "bias2")


def load(steps, n_hidden):
    """A fresh copy of the example (its kernels compile for these sizes), its fields allocated."""
    spec = importlib.util.spec_from_file_location("electric_example", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.steps, module.seg_size, module.n_hidden = steps, steps // 2, n_hidden
    module.allocate_fields()
    return module


def rollout_numpy(m, params, goal, goal_v, x_before, v_before):
    """The loss of one rollout in float64: electric.py's nn1, nn2, advance and compute_loss per step."""
    w1, b1, w2, b2 = params
    x, v = x_before.copy(), v_before.copy()
    positions = np.array(m.gravitation_position)
    loss = 0.0
    for t in range(1, m.steps):
        features = np.concatenate([x[t] - 0.5, v[t], goal[t] - 0.5, goal_v[t] - 0.5])
        hidden = np.tanh(features @ w1 + b1)
        charge = np.tanh(hidden @ w2 + b2)
        r = x[t - 1] - positions
        length = np.maximum(np.linalg.norm(r, axis=1), 0.1)
        force = (m.K * charge / length ** 3) @ r
        v[t] = v[t - 1] * np.exp(-m.dt * m.damping) + m.dt * force
        x[t] = x[t - 1] + m.dt * v[t]
        loss += m.dt * np.sum((x[t] - goal[t]) ** 2)
    return loss


def tape_rollout(m, rng):
    """One rollout under sp.Tape; returns what the numpy version needs, the loss and the gradients."""
    m.initialize(rng)
    state = [a.to_numpy().astype(np.float64) for a in (m.goal, m.goal_v, m.x, m.v)]
    params = [getattr(m, p).to_numpy().astype(np.float64) for p in PARAMS]
    m.loss.fill(0.0)
    with sp.Tape(m.loss):
        m.forward()
    grads = [getattr(m, p).grad.to_numpy().astype(np.float64) for p in PARAMS]
    return state, params, float(m.loss.to_numpy()), grads


@pytest.mark.parametrize("rollouts", [1, 2])
def test_loss_and_weight_gradients_match_float64(rollouts):
    m = load(steps=24, n_hidden=16)
    m.init_weights(np.random.default_rng(3))
    for k in range(rollouts):
        state, params, loss, grads = tape_rollout(m, np.random.default_rng(10 + k))
    assert rollouts == 1 or np.abs(state[2][1:]).max() > 0.1   # the second reads the first's states

    def total(ps):
        return rollout_numpy(m, ps, *state)
    np.testing.assert_allclose(loss, total(params), rtol=1e-4)
    rng, eps = np.random.default_rng(7), 1e-6
    for which in [None, 0, 1, 2, 3]:   # all weights at once, then each array alone
        direction = [rng.standard_normal(p.shape) if which in (None, k) else np.zeros(p.shape)
                     for k, p in enumerate(params)]
        fd = (total([p + eps * d for p, d in zip(params, direction)]) -
              total([p - eps * d for p, d in zip(params, direction)])) / (2 * eps)
        got = sum(float(np.sum(g * d)) for g, d in zip(grads, direction))
        assert abs(fd) > 1e-6, "vacuous: no gradient along this direction"
        assert got == pytest.approx(fd, rel=2e-3, abs=1e-3 * abs(fd)), (which, got, fd)


def test_gradient_steps_lower_the_loss():
    """The original's learning rate is small (it trains for 200,000 iterations): each step lowers the loss a
    little (after the first rollout, whose network input, the previous rollout's states, was zeros)."""
    m = load(steps=32, n_hidden=16)
    m.init_weights(np.random.default_rng(0))
    losses = [m.step(np.random.default_rng(1)) for _ in range(6)]
    assert all(b < a for a, b in zip(losses[1:], losses[2:])), losses
