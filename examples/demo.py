"""A differentiable kernel in one minute: integrate v' = 0.1*sin(v)*w for n steps per element, on the
default device (your GPU through Vulkan, or Mesa's lavapipe CPU driver when there is none), then get
d(loss)/d(v0) and d(loss)/d(w) by reverse mode through the dynamic loop."""
import numpy as np

import spvad as sp


@sp.kernel
def integrate(v0: sp.Array, w: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(v0.shape[0]):      # outermost loop: one GPU thread per i
        v = v0[i]
        for _ in range(n):            # dynamic inner loop, serial within the thread
            v = v + 0.1 * sp.sin(v) * w[i]
        out[i] = v


@sp.kernel
def total(out: sp.Array, loss: sp.Array):
    for i in range(out.shape[0]):
        loss[None] += out[i] ** 2     # an atomic add into a 0-d array


def reference_loss(v0, w, n):
    """The same computation in float64 numpy, to check the gradients by finite differences."""
    v = v0.copy()
    for _ in range(n):
        v = v + 0.1 * np.sin(v) * w
    return np.sum(v ** 2)


def main():
    rng = np.random.default_rng(0)
    v0_np, w_np, n = rng.uniform(0.5, 1.5, 8), rng.uniform(0.5, 1.5, 8), 16
    v0 = sp.from_numpy(v0_np.astype(np.float32), needs_grad=True)
    w = sp.from_numpy(w_np.astype(np.float32), needs_grad=True)
    out = sp.ndarray(sp.f32, (8,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    print("device:", sp.device_info()["name"])
    with sp.Tape(loss=loss):          # records the launches, then runs their gradients in reverse
        integrate(v0, w, out, n)
        total(out, loss)
    print("values: ", np.round(out.to_numpy(), 4), " loss:", round(loss[None], 4))
    print("dL/dv0: ", np.round(v0.grad.to_numpy(), 4))
    print("dL/dw:  ", np.round(w.grad.to_numpy(), 4))
    eps = 1e-6
    fd = np.array([(reference_loss(v0_np + eps * e, w_np, n) - reference_loss(v0_np - eps * e, w_np, n)) / (2 * eps)
                   for e in np.eye(8)])
    print("dL/dv0 by float64 finite differences:", np.round(fd, 4))


if __name__ == "__main__":
    main()
