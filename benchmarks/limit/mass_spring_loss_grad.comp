#version 450
// Mass-spring reverse, start (d loss/d loss = 1): x.grad = 2*(x_T - target)/n, v.grad = 0 (it is stored, not
// added, so nothing needs zeroing first), and k.grad = 0 before the steps add into it.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer XS { float xs[]; };
layout(std430, binding = 1) readonly buffer T { float target[]; };
layout(std430, binding = 2) writeonly buffer GX { float gx[]; };
layout(std430, binding = 3) writeonly buffer GV { float gv[]; };
layout(std430, binding = 4) writeonly buffer GK { float gk[]; };
layout(push_constant) uniform Args { uint n; uint ns; uint t; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < n) {
        uint p = 2 * t * n + 2 * i;
        gx[2 * i] = 2.0 * (xs[p] - target[2 * i]) / float(n);
        gx[2 * i + 1] = 2.0 * (xs[p + 1] - target[2 * i + 1]) / float(n);
        gv[2 * i] = 0.0;
        gv[2 * i + 1] = 0.0;
    }
    if (i < ns) gk[i] = 0.0;
}
