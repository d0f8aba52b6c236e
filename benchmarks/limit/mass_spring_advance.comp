#version 450
// Mass-spring, step t, kernel 2 (one thread per particle): symplectic Euler,
// v' = free*(v*DAMPING + DT*(f + (0, GRAVITY))), x' = x + DT*v'; v is updated in place, f cleared for step t+1.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer XS { float xs[]; };
layout(std430, binding = 1) buffer V { float v[]; };
layout(std430, binding = 2) buffer F { float f[]; };
layout(std430, binding = 3) readonly buffer FREE { float free_[]; };
layout(push_constant) uniform Args { uint n; uint t; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= n) return;
    float fr = free_[i];
    float vx = fr * (v[2 * i] * DAMPING + DT * f[2 * i]);
    float vy = fr * (v[2 * i + 1] * DAMPING + DT * (f[2 * i + 1] + GRAVITY));
    v[2 * i] = vx;
    v[2 * i + 1] = vy;
    f[2 * i] = 0.0;
    f[2 * i + 1] = 0.0;
    uint p = 2 * t * n + 2 * i, q = p + 2 * n;
    xs[q] = xs[p] + DT * vx;
    xs[q + 1] = xs[p + 1] + DT * vy;
}
