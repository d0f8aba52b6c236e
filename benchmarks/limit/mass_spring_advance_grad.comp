#version 450
// Mass-spring reverse of the advance kernel (one thread per particle), with u = v.grad' + DT*x.grad':
// x.grad passes through unchanged, v.grad = free*DAMPING*u, f.grad = free*DT*u (all in place).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer GX { float gx[]; };
layout(std430, binding = 1) buffer GV { float gv[]; };
layout(std430, binding = 2) writeonly buffer GF { float gf[]; };
layout(std430, binding = 3) readonly buffer FREE { float free_[]; };
layout(push_constant) uniform Args { uint n; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= n) return;
    float fr = free_[i];
    float ux = gv[2 * i] + DT * gx[2 * i], uy = gv[2 * i + 1] + DT * gx[2 * i + 1];
    gv[2 * i] = fr * DAMPING * ux;
    gv[2 * i + 1] = fr * DAMPING * uy;
    gf[2 * i] = fr * DT * ux;
    gf[2 * i + 1] = fr * DT * uy;
}
