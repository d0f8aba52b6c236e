"""examples/sdf_normals.py: the image rendered with normals by sp.grad against the same renderer in float64
numpy with the normal in closed form, and the gradient of an image loss with respect to the radius (through
the march and through the normal: a second derivative) against float64 central differences of that
renderer, on pixels away from the silhouette (where the loss is smooth)."""
import importlib.util
import pathlib

import numpy as np
import pytest

import spvad as sp

PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "sdf_normals.py"
SIZE = 24


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("sdf_normals_example", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@sp.kernel
def masked_loss(image: sp.Array, target: sp.Array, mask: sp.Array, loss: sp.Array):
    for i, j in sp.ndrange(image.shape[0], image.shape[1]):
        d = image[i, j] - target[i, j]
        loss[None] += mask[i, j] * d * d


def _interior(hit):
    """Pixels that hit, with every neighbour hitting too (two pixels in)."""
    m = hit.copy()
    for _ in range(2):
        m = m & np.roll(m, 1, 0) & np.roll(m, -1, 0) & np.roll(m, 1, 1) & np.roll(m, -1, 1)
    return m


def test_the_image_matches_float64(ex):
    image = sp.ndarray(sp.f32, (SIZE, SIZE))
    ex.render(image, sp.from_numpy(np.array([0.7], np.float32)), SIZE)
    want = ex.render_np(0.7, SIZE)
    got = image.to_numpy()
    inside = _interior(want > 0)
    assert inside.sum() > 50
    np.testing.assert_allclose(got[inside], want[inside], rtol=2e-3, atol=2e-3)
    assert np.mean((got > 0) == (want > 0)) > 0.97   # the silhouettes agree but for rounding at the edge


@pytest.mark.parametrize("r", [0.62, 0.7])
def test_the_radius_gradient_matches_float64_differences(ex, r):
    target_np = ex.render_np(0.75, SIZE)
    mask_np = _interior((ex.render_np(r - 0.01, SIZE) > 0) & (ex.render_np(r + 0.01, SIZE) > 0)).astype(np.float64)
    image = sp.ndarray(sp.f32, (SIZE, SIZE), needs_grad=True)
    radius = sp.from_numpy(np.array([r], np.float32), needs_grad=True)
    target, mask = sp.from_numpy(target_np.astype(np.float32)), sp.from_numpy(mask_np.astype(np.float32))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        ex.render(image, radius, SIZE)
        masked_loss(image, target, mask, loss)

    def loss_np(rr):
        return np.sum(mask_np * (ex.render_np(rr, SIZE) - target_np) ** 2)

    fd = (loss_np(r + 1e-5) - loss_np(r - 1e-5)) / 2e-5
    assert abs(fd) > 1e-3
    np.testing.assert_allclose(float(radius.grad[0]), fd, rtol=1e-4)
