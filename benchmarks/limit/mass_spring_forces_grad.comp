#version 450
// Mass-spring reverse of the force kernel at step t (one thread per spring s = (i, j)). With G = f.grad_i -
// f.grad_j, d = x_j - x_i, L = |d|, c = k*(L - rest)/L:
//   k.grad_s += (G.d)*(L - rest)/L,   d.grad = c*G + (G.d)*k*rest/L^3 * d,   x.grad_j += d.grad, x.grad_i -= d.grad.
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer XS { float xs[]; };
layout(std430, binding = 1) readonly buffer GF { float gf[]; };
layout(std430, binding = 2) buffer GX { float gx[]; };
layout(std430, binding = 3) buffer GK { float gk[]; };
layout(std430, binding = 4) readonly buffer A { int a[]; };
layout(std430, binding = 5) readonly buffer B { int b[]; };
layout(std430, binding = 6) readonly buffer K { float k[]; };
layout(std430, binding = 7) readonly buffer R { float rest[]; };
layout(push_constant) uniform Args { uint ns; uint n; uint t; };

void main() {
    uint s = gl_GlobalInvocationID.x;
    if (s >= ns) return;
    uint i = uint(a[s]), j = uint(b[s]), xt = 2 * t * n;
    float dx = xs[xt + 2 * j] - xs[xt + 2 * i], dy = xs[xt + 2 * j + 1] - xs[xt + 2 * i + 1];
    float len = sqrt(dx * dx + dy * dy), r = rest[s], ks = k[s];
    float c = ks * (len - r) / len;
    float gdx = gf[2 * i] - gf[2 * j], gdy = gf[2 * i + 1] - gf[2 * j + 1];
    float gd = gdx * dx + gdy * dy;
    gk[s] += gd * (len - r) / len;
    float q = gd * ks * r / (len * len * len);
    float ddx = c * gdx + q * dx, ddy = c * gdy + q * dy;
    atomicAdd(gx[2 * j], ddx);
    atomicAdd(gx[2 * j + 1], ddy);
    atomicAdd(gx[2 * i], -ddx);
    atomicAdd(gx[2 * i + 1], -ddy);
}
