"""A differentiable kernel in one minute: integrate v' = 0.1*sin(v)*w for n steps per element, on the
default device (your GPU through Vulkan, or Mesa's lavapipe CPU driver when there is none)."""
import numpy as np

import spvad as sp


@sp.kernel
def integrate(v0: sp.Array, w: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(v0.shape[0]):      # outermost loop: one GPU thread per i
        v = v0[i]
        for _ in range(n):            # dynamic inner loop, serial within the thread
            v = v + 0.1 * sp.sin(v) * w[i]
        out[i] = v


def main():
    rng = np.random.default_rng(0)
    v0 = sp.from_numpy(rng.uniform(0.5, 1.5, 8).astype(np.float32), needs_grad=True)
    w = sp.from_numpy(rng.uniform(0.5, 1.5, 8).astype(np.float32), needs_grad=True)
    out = sp.ndarray(sp.f32, (8,), needs_grad=True)
    print("device:", sp.device_info()["name"])
    integrate(v0, w, out, 16)
    print("values:   ", np.round(out.to_numpy(), 4))


if __name__ == "__main__":
    main()
