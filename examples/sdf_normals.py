"""Normals of a signed distance function by `sp.grad`, and a parameter fitted through them.

The scene is a bumpy sphere, sdf(p, r) = |p| - r + B sin(3x) sin(3y) sin(3z). Each pixel marches its ray
to the surface (sphere tracing: a dynamic loop), takes the normal as the gradient of the SDF at the hit
point (`sp.grad(sdf, argnums=0)`, per thread, inside the kernel) and shades it with a light. Then gradient
descent on the radius r makes the rendered image match one rendered with another radius: the loss
differentiates through the march and through the normal, a derivative of a derivative.

    python examples/sdf_normals.py [--size 64] [--iters 15] [--picture sdf.png]

The picture needs Pillow (`pip install pillow`); without it the example says so and skips it."""
import argparse

import numpy as np

import spvad as sp

BUMP = 0.06
STEPS = 48                           # sphere-tracing steps per ray
LIGHT = np.array([0.48, 0.6, -0.64])   # unit vector towards the light


@sp.func
def sdf(p, r):
    return sp.length(p) - r + BUMP * sp.sin(3.0 * p[0]) * sp.sin(3.0 * p[1]) * sp.sin(3.0 * p[2])


@sp.func
def pixel_ray(i, j, size):
    """An orthographic ray through pixel (i, j): its origin on the plane z = -2, looking along +z."""
    u = (j + 0.5) / size * 2.4 - 1.2
    v = 1.2 - (i + 0.5) / size * 2.4
    return sp.vec3(u, v, -2.0)


@sp.kernel
def render(image: sp.Array, r: sp.Array, size: sp.i32):
    """Shades each pixel's first hit (0 where the ray misses); the radius is r[0], an array so that a Tape
    gives its gradient."""
    for i, j in sp.ndrange(size, size):
        p = pixel_ray(i, j, size)
        hit = 0
        for _ in range(STEPS):
            d = sdf(p, r[0])
            if d < 1e-4:
                hit = 1
                break
            if p[2] > 2.0:
                break
            p = p + sp.vec3(0.0, 0.0, d)
        shade = 0.0
        if hit == 1:
            n = sp.normalize(sp.grad(sdf, argnums=0)(p, r[0]))   # the normal: d sdf / d p
            shade = sp.max(sp.dot(n, sp.vec3(LIGHT[0], LIGHT[1], LIGHT[2])), 0.0)
        image[i, j] = shade


@sp.kernel
def image_loss(image: sp.Array, target: sp.Array, loss: sp.Array):
    for i, j in sp.ndrange(image.shape[0], image.shape[1]):
        d = image[i, j] - target[i, j]
        loss[None] += d * d / (image.shape[0] * image.shape[1])


def fit(size=64, r_target=0.75, r0=0.55, iters=15, rate=2.0):
    """Renders the target at r_target, then descends on r from r0; returns (history of (loss, r), image,
    target)."""
    target = sp.ndarray(sp.f32, (size, size))
    render(target, sp.from_numpy(np.array([r_target], np.float32)), size)
    image = sp.ndarray(sp.f32, (size, size), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    r = sp.ndarray(sp.f32, (1,), needs_grad=True)
    history, value = [], r0
    for _ in range(iters):
        r.from_numpy(np.array([value], np.float32))
        loss.fill(0.0)
        with sp.Tape(loss=loss):
            render(image, r, size)
            image_loss(image, target, loss)
        history.append((float(loss[None]), value))
        g = float(r.grad[0])
        value -= rate * g / max(1.0, abs(g) / 0.2)   # a clipped step
    return history, image.to_numpy(), target.to_numpy()


# ---- the same in float64 numpy: the normal in closed form (tests/examples/test_sdf_normals.py) -----------------
def sdf_np(p, r):
    return np.linalg.norm(p, axis=-1) - r + BUMP * np.sin(3 * p[..., 0]) * np.sin(3 * p[..., 1]) * np.sin(3 * p[..., 2])


def normal_np(p, r):
    s, c = np.sin(3 * p), np.cos(3 * p)
    g = p / np.linalg.norm(p, axis=-1, keepdims=True)
    g = g + 3 * BUMP * np.stack([c[..., 0] * s[..., 1] * s[..., 2], s[..., 0] * c[..., 1] * s[..., 2],
                                 s[..., 0] * s[..., 1] * c[..., 2]], -1)
    return g


def render_np(r, size):
    i, j = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    p = np.stack([(j + 0.5) / size * 2.4 - 1.2, 1.2 - (i + 0.5) / size * 2.4, np.full(i.shape, -2.0)], -1)
    hit = np.zeros(i.shape, bool)
    done = np.zeros(i.shape, bool)
    for _ in range(STEPS):
        d = sdf_np(p, r)
        newly = ~done & (d < 1e-4)
        hit |= newly
        done |= newly | (~done & (p[..., 2] > 2.0))
        p[..., 2] = np.where(done, p[..., 2], p[..., 2] + d)
    n = normal_np(p, r)
    n = n / np.linalg.norm(n, axis=-1, keepdims=True)
    return np.where(hit, np.maximum(n @ LIGHT, 0.0), 0.0)


def picture(path, image, target):
    try:
        from PIL import Image
    except ImportError:
        print("(no picture: pip install pillow)")
        return
    both = np.concatenate([target, np.ones((target.shape[0], 4)), image], axis=1)
    Image.fromarray((np.clip(both, 0, 1) * 255).astype(np.uint8)).resize(
        (both.shape[1] * 4, both.shape[0] * 4), Image.NEAREST).save(path)
    print(f"picture: {path} (left: the target, right: the fitted radius)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--picture", default="sdf.png")
    a = ap.parse_args()
    print(f"device: {sp.device_info()['name']}; {a.size}x{a.size} pixels, target radius 0.75")
    history, image, target = fit(a.size, iters=a.iters)
    for k, (loss, r) in enumerate(history):
        print(f"iter {k:2d}: loss {loss:.6f}  r = {r:.4f}")
    picture(a.picture, image, target)


if __name__ == "__main__":
    main()
