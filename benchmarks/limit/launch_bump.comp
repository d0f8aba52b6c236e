#version 450
// Launch overhead: the smallest kernel of the workload, a[i] += 1 over 64 elements in one workgroup.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer A { float a[]; };

void main() {
    a[gl_GlobalInvocationID.x] += 1.0;
}
