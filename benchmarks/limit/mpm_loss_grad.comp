#version 450
// MLS-MPM reverse, start (d loss/d loss = 1), one thread per particle and per grid node:
//   loss = sum_p |x[f][p] - target|^2 / n  =>  x.grad[p] = 2*(x[f][p] - target)/n.
// The particles' other gradients (v, C, F of the last step) are 0: they are stored here, not added, so no
// gradient array needs zeroing before the reverse. The grid-velocity gradient (accumulated by g2p_grad's
// atomics, cleared again by grid_grad after each step) and v0.grad (accumulated by launch_grad) start at 0.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { vec2 x[]; };
layout(std430, binding = 1) readonly buffer T { vec2 target; };
layout(std430, binding = 2) writeonly buffer GX { vec2 gx[]; };
layout(std430, binding = 3) writeonly buffer GVP { vec2 gv[]; };
layout(std430, binding = 4) writeonly buffer GC { vec4 gC[]; };
layout(std430, binding = 5) writeonly buffer GF { vec4 gF[]; };
layout(std430, binding = 6) writeonly buffer GGV { vec2 ggrid_v[]; };
layout(std430, binding = 7) writeonly buffer GV0 { vec2 gv0; };
layout(push_constant) uniform Args { uint n; uint f; };

void main() {
    uint p = gl_GlobalInvocationID.x;
    if (p < n) {
        gx[p] = 2.0 * (x[f * n + p] - target) / float(n);
        gv[p] = vec2(0.0);
        gC[p] = vec4(0.0);
        gF[p] = vec4(0.0);
    }
    if (p < GRID * GRID) ggrid_v[p] = vec2(0.0);
    if (p == 0) gv0 = vec2(0.0);
}
