#version 450
// The small-kernel Tape's loss: the sum of u[t] (a float atomic per element).
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer U { float u[]; };
layout(std430, binding = 1) buffer L { float loss; };
layout(push_constant) uniform Args { uint n; uint t; };

void main() {
    atomicAdd(loss, u[t * n + gl_GlobalInvocationID.x]);
}
