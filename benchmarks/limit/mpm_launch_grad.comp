#version 450
// MLS-MPM reverse of the launch (one thread per particle): v[0][p] = v0 for every p, so v0.grad = sum_p v.grad[p]
// (v.grad of step 0, as p2g_grad left it), summed in shared memory per workgroup (a power-of-two size) and added
// to v0.grad (zeroed by loss_grad) with one pair of float atomics per workgroup.
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer GVP { vec2 gv[]; };
layout(std430, binding = 1) buffer GV0 { float gv0[]; };
layout(push_constant) uniform Args { uint n; };
shared vec2 part[gl_WorkGroupSize.x];

void main() {
    uint p = gl_GlobalInvocationID.x, l = gl_LocalInvocationID.x;
    part[l] = p < n ? gv[p] : vec2(0.0);
    for (uint h = gl_WorkGroupSize.x / 2; h > 0; h >>= 1) {
        barrier();
        if (l < h) part[l] += part[l + h];
    }
    if (l == 0) {
        atomicAdd(gv0[0], part[0].x);
        atomicAdd(gv0[1], part[0].y);
    }
}
