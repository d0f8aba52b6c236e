#version 450
// Reduce forward: loss += sum of x[i]^2 over n float32 values, four consecutive elements per thread (vec4
// loads, as spvad's coarsened tasks). Each subgroup adds its threads' sums (subgroupAdd); without SHARED its
// elected thread does the atomic, with SHARED it puts the sum in shared memory and, after one barrier, the
// first subgroup adds those and one thread does the workgroup's only atomic.
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_EXT_shader_atomic_float : enable
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { vec4 x[]; };
layout(std430, binding = 1) buffer Loss { float loss; };
layout(push_constant) uniform Args { uint n4; };   // whole vec4s (the caller's n is a multiple of 4)
#ifdef SHARED
shared float partial[1024];   // one per subgroup; maxComputeWorkGroupInvocations bounds their number
#endif

void main() {
    uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    float v = 0.0;
    if (i < n4) {
        vec4 a = x[i];
        v = dot(a, a);
    }
    float s = subgroupAdd(v);
#ifdef SHARED
    if (subgroupElect()) partial[gl_SubgroupID] = s;
    barrier();
    if (gl_SubgroupID == 0) {
        float t = 0.0;
        for (uint k = gl_SubgroupInvocationID; k < gl_NumSubgroups; k += gl_SubgroupSize) t += partial[k];
        t = subgroupAdd(t);
        if (subgroupElect()) atomicAdd(loss, t);
    }
#else
    if (subgroupElect()) atomicAdd(loss, s);
#endif
}
