#version 450
// MLS-MPM launch (one thread per particle): every particle starts with the shared initial velocity, v[0][p] = v0.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) writeonly buffer V { vec2 v[]; };
layout(std430, binding = 1) readonly buffer V0 { vec2 v0; };
layout(push_constant) uniform Args { uint n; };

void main() {
    uint p = gl_GlobalInvocationID.x;
    if (p >= n) return;
    v[p] = v0;
}
