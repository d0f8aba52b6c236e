#version 450
// MLS-MPM loss (one thread per particle): the mean over particles of |x[f][p] - target|^2, summed in shared
// memory per workgroup (a power-of-two size) and added to the loss with one float atomic per workgroup.
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { vec2 x[]; };
layout(std430, binding = 1) readonly buffer T { vec2 target; };
layout(std430, binding = 2) buffer L { float loss; };
layout(push_constant) uniform Args { uint n; uint f; };
shared float part[gl_WorkGroupSize.x];

void main() {
    uint p = gl_GlobalInvocationID.x, l = gl_LocalInvocationID.x;
    float term = 0.0;
    if (p < n) {
        vec2 d = x[f * n + p] - target;
        term = dot(d, d) / float(n);
    }
    part[l] = term;
    for (uint h = gl_WorkGroupSize.x / 2; h > 0; h >>= 1) {
        barrier();
        if (l < h) part[l] += part[l + h];
    }
    if (l == 0) atomicAdd(loss, part[0]);
}
