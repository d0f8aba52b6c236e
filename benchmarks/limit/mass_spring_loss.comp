#version 450
// Mass-spring loss: the mean over particles of |x_T - target|^2, accumulated with a float atomic.
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer XS { float xs[]; };
layout(std430, binding = 1) readonly buffer T { float target[]; };
layout(std430, binding = 2) buffer L { float loss; };
layout(push_constant) uniform Args { uint n; uint t; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= n) return;
    uint p = 2 * t * n + 2 * i;
    float dx = xs[p] - target[2 * i], dy = xs[p + 1] - target[2 * i + 1];
    atomicAdd(loss, (dx * dx + dy * dy) / float(n));
}
