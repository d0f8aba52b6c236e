#version 450
// Integrator forward: per thread v = v + 0.01*sin(v)*w[i] for `steps` iterations (a runtime push constant).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Args { uint n; int steps; };

void main() {
    uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    if (i >= n) return;
    float v = x[i], wi = w[i];
    for (int s = 0; s < steps; s++) v = v + 0.01 * sin(v) * wi;
    y[i] = v;
}
