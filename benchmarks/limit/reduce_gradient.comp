#version 450
// Reduce gradient: the weight gradient of a dense layer y[b] = W x[b] (W: J x K) over a batch,
// gW[j][k] += sum_b gy[b][j] * x[b][k], one row b per thread (as spvad's gradient kernel), gy consumed (set to 0)
// as spvad's gradient does; J and K are push constants, as spvad reads the shapes at launch. Each subgroup
// adds its rows' products (subgroupAdd); with SHARED its elected thread keeps the sums in shared memory and,
// after one barrier, the workgroup's threads add the subgroups' sums and do one atomic per weight; without
// SHARED the elected thread does the atomics.
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_EXT_shader_atomic_float : enable
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };   // batch x K
layout(std430, binding = 1) buffer GY { float gy[]; };          // batch x J
layout(std430, binding = 2) buffer GW { float gw[]; };          // J x K
layout(push_constant) uniform Args { uint batch; uint J; uint K; };
// SUBGROUPS: the most subgroups of a workgroup (workgroup size / subgroup size); WEIGHTS: the most J * K
#ifdef SHARED
shared float partial[SUBGROUPS * WEIGHTS];
#endif

void main() {
    uint b = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    bool live = b < batch;
    for (uint j = 0; j < J; j++) {
        float g = 0.0;
        if (live) {
            g = gy[b * J + j];
            gy[b * J + j] = 0.0;
        }
        for (uint k = 0; k < K; k++) {
            float s = subgroupAdd(live ? g * x[b * K + k] : 0.0);
#ifdef SHARED
            if (subgroupElect()) partial[gl_SubgroupID * J * K + j * K + k] = s;
#else
            if (subgroupElect()) atomicAdd(gw[j * K + k], s);
#endif
        }
    }
#ifdef SHARED
    barrier();
    for (uint w = gl_LocalInvocationIndex; w < J * K; w += gl_WorkGroupSize.x) {
        float t = 0.0;
        for (uint k = 0; k < gl_NumSubgroups; k++) t += partial[k * J * K + w];
        atomicAdd(gw[w], t);
    }
#endif
}
