#version 450
// Mass-spring, step t, kernel 1 (one thread per spring s = (i, j)): the spring force
// c*d, d = x_j - x_i, c = k*(|d| - rest)/|d|, added to f_i and subtracted from f_j with float atomics.
// Positions of every step are kept (xs[t][i], the reverse reads them); f is one (n, 2) array that the
// advance kernel reads and clears.
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer XS { float xs[]; };
layout(std430, binding = 1) buffer F { float f[]; };
layout(std430, binding = 2) readonly buffer A { int a[]; };
layout(std430, binding = 3) readonly buffer B { int b[]; };
layout(std430, binding = 4) readonly buffer K { float k[]; };
layout(std430, binding = 5) readonly buffer R { float rest[]; };
layout(push_constant) uniform Args { uint ns; uint n; uint t; };

void main() {
    uint s = gl_GlobalInvocationID.x;
    if (s >= ns) return;
    uint i = uint(a[s]), j = uint(b[s]), xt = 2 * t * n;
    float dx = xs[xt + 2 * j] - xs[xt + 2 * i], dy = xs[xt + 2 * j + 1] - xs[xt + 2 * i + 1];
    float len = sqrt(dx * dx + dy * dy);
    float c = k[s] * (len - rest[s]) / len;
    atomicAdd(f[2 * i], c * dx);
    atomicAdd(f[2 * i + 1], c * dy);
    atomicAdd(f[2 * j], -c * dx);
    atomicAdd(f[2 * j + 1], -c * dy);
}
