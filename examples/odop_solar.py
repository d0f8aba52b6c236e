"""Taichi's odop_solar.py (the gallery's example of objective data-oriented programming), ported: planets on
Kepler orbits around a sun, simulated by a `@sp.data_oriented` class. Its kernels read `self`'s arrays and
numbers, call a `@staticmethod` func drawing random vectors and a func method computing the sun's gravity.

    python examples/odop_solar.py [--bodies 8] [--frames 100] [--picture solar.png]

Taichi draws each frame with ti.GUI; here `--picture` draws the orbits with Pillow (if installed)."""
import argparse
import math

import numpy as np

import spvad as sp


@sp.data_oriented
class SolarSystem:
    def __init__(self, n, dt):   # the simulator's state: positions, velocities and the sun's position
        self.n = n
        self.dt = dt
        self.x = sp.ndarray(sp.vec2, (n,))
        self.v = sp.ndarray(sp.vec2, (n,))
        self.center = sp.ndarray(sp.vec2, ())

    @staticmethod
    @sp.func
    def random_vector(radius):   # a random vector in a circle
        theta = sp.random() * 2 * math.pi
        r = sp.random() * radius
        return r * sp.Vector([sp.cos(theta), sp.sin(theta)])

    @sp.kernel
    def initialize_particles(self):
        for i in range(self.n):
            offset = self.random_vector(0.5)
            self.x[i] = self.center[None] + offset   # offset from the sun
            self.v[i] = [-offset.y, offset.x]        # perpendicular to the offset
            self.v[i] += self.random_vector(0.02)    # random velocity noise
            self.v[i] *= 1 / offset.norm() ** 1.5    # Kepler's third law

    @sp.func
    def gravity(self, pos):   # the sun's pull at pos
        offset = -(pos - self.center[None])
        return offset / offset.norm() ** 3

    @sp.kernel
    def integrate(self):   # semi-implicit Euler
        for i in range(self.n):
            self.v[i] += self.dt * self.gravity(self.x[i])
            self.x[i] += self.dt * self.v[i]


def make_solar(n=8, dt=0.0001):
    solar = SolarSystem(n, dt)
    solar.center[None] = [0.5, 0.5]
    solar.initialize_particles()
    return solar


def draw(tracks, path, size=512):
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        print("the picture needs Pillow (pip install pillow)")
        return
    image = Image.new("RGB", (size, size), (0, 7, 26))
    pen = ImageDraw.Draw(image)
    pen.ellipse([size / 2 - 10, size / 2 - 10, size / 2 + 10, size / 2 + 10], fill=(255, 170, 136))
    for body in np.transpose(tracks, (1, 0, 2)):
        pen.line([(float(x) * size, (1 - float(y)) * size) for x, y in body], fill=(255, 255, 255), width=1)
    image.save(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=8)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--picture", default=None)
    args = parser.parse_args()
    solar = make_solar(args.bodies)
    tracks = []
    for _ in range(args.frames):
        for _ in range(10):   # time integration: ten steps per frame, as the original
            solar.integrate()
        tracks.append(solar.x.to_numpy())
    radii = np.linalg.norm(tracks[-1] - 0.5, axis=1)
    print(f"{args.frames} frames; distances from the sun: {np.round(radii, 3)}")
    if args.picture:
        draw(np.array(tracks), args.picture)


if __name__ == "__main__":
    main()
