#version 450
// The small-kernel Tape, forward step t: u[t+1][i] = u[t][i] * w[i] + 0.01 over 64 elements (one workgroup).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer U { float u[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(push_constant) uniform Args { uint n; uint t; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    u[(t + 1) * n + i] = u[t * n + i] * w[i] + 0.01;
}
