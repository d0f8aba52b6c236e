#version 450
// The small-kernel Tape's reverse start: d loss / d u[T] = 1, and w.grad = 0 before the steps add into it.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) writeonly buffer G { float g[]; };
layout(std430, binding = 1) writeonly buffer GW { float gw[]; };

void main() {
    g[gl_GlobalInvocationID.x] = 1.0;
    gw[gl_GlobalInvocationID.x] = 0.0;
}
