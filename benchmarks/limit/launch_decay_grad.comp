#version 450
// The small-kernel Tape, reverse of step t, in place: w.grad[i] += u[t][i] * g[i], then g[i] *= w[i] (g holds
// d loss / d u[t+1] on entry, d loss / d u[t] on exit).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer U { float u[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer G { float g[]; };
layout(std430, binding = 3) buffer GW { float gw[]; };
layout(push_constant) uniform Args { uint n; uint t; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    gw[i] += u[t * n + i] * g[i];
    g[i] *= w[i];
}
