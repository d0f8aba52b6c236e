#version 450
// Elementwise gradient: x.grad += y.grad * 1.5 * (1 - tanh(1.5*x + 0.2)^2), and y.grad is consumed (set to 0)
// as spvad's gradient does; four consecutive elements per thread, as in elementwise_forward.comp.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { vec4 x[]; };
layout(std430, binding = 1) buffer GY { vec4 gy[]; };
layout(std430, binding = 2) buffer GX { vec4 gx[]; };
layout(push_constant) uniform Args { uint n4; };

void main() {
    uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    if (i >= n4) return;
    vec4 t = tanh(1.5 * x[i] + 0.2);
    gx[i] += gy[i] * 1.5 * (1.0 - t * t);
    gy[i] = vec4(0.0);
}
