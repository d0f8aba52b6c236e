#version 450
// Integrator gradient, hand-written reverse mode: the forward sweep stores the two local partials of each step,
// a = d v'/d v = 1 + 0.01*cos(v)*w and b = d v'/d w = 0.01*sin(v), in Function-scope arrays sized by a
// specialisation constant (CAP = the workload's steps); the reverse sweep is two loads and two multiply-adds
// per step. Same contract as spvad's gradient: adds into x.grad and w.grad, consumes y.grad (sets it to 0).
// Measured on lavapipe (AMD EPYC, 65,536 threads x 64 steps; forward 8.8 ms): these partials 11.6 ms; a stack
// of v, recomputing sin and cos in the reverse sweep, 14.7 ms; a and b interleaved in one vec2 array 11.9 ms.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int CAP = 64;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer GY { float gy[]; };
layout(std430, binding = 3) buffer GX { float gx[]; };
layout(std430, binding = 4) buffer GW { float gw[]; };
layout(push_constant) uniform Args { uint n; int steps; };

void main() {
    uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    if (i >= n) return;
    if (steps > CAP) {          // the arrays are too small: poison the result instead of writing past them
        gx[i] = uintBitsToFloat(0x7fc00000u);
        return;
    }
    float v = x[i], wi = w[i];
    float a[CAP], b[CAP];
    for (int s = 0; s < steps; s++) {
        float sn = sin(v);
        a[s] = 1.0 + 0.01 * cos(v) * wi;
        b[s] = 0.01 * sn;
        v = v + 0.01 * sn * wi;
    }
    float g = gy[i], gwi = 0.0;
    for (int s = steps - 1; s >= 0; s--) {
        gwi += g * b[s];
        g *= a[s];
    }
    gx[i] += g;
    gw[i] += gwi;
    gy[i] = 0.0;
}
