#version 450
// MLS-MPM reverse of g2p at step f (one thread per particle). The particle gradients gx, gv, gC (one row per
// particle, updated in place) hold those of x, v, C of step f+1 on entry; on exit gx holds x[f]'s (so far:
// p2g_grad adds its part), and the grid-velocity gradient of step f has been scattered with float atomics.
// Forward, with xp = x*INV_DX, base = int(xp - 0.5), fx = xp - base, dpos = node - fx (in cells), K = 4*INV_DX,
// w = wx[i]*wy[j] and the quadratic B-spline weights wx = (0.5(1.5-fx)^2, 0.75-(fx-1)^2, 0.5(fx-0.5)^2):
//   v' = sum w g,   C' = sum K w g dpos^T,   x' = x + DT v'.
// Reverse, with u = v'.grad + DT x'.grad and G = C'.grad:
//   g.grad   += w u + K w G dpos                 (C'_ab = K w g_a dpos_b)
//   w.grad    = u.g + K g.(G dpos)
//   dpos.grad = K w G^T g,  so  fx.grad -= K w G^T g
//   wx[i].grad += w.grad*wy[j],  wy[j].grad += w.grad*wx[i]
//   fx.grad += sum_i wx[i].grad * dwx[i]/dfx,  dw/dfx = (fx - 1.5, -2(fx - 1), fx - 0.5)  (per axis)
//   x.grad = x'.grad + INV_DX fx.grad            (base is piecewise constant: no derivative)
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { vec2 x[]; };
layout(std430, binding = 1) readonly buffer GV { vec2 grid_v[]; };
layout(std430, binding = 2) buffer GX { vec2 gx[]; };
layout(std430, binding = 3) readonly buffer GVP { vec2 gv[]; };
layout(std430, binding = 4) readonly buffer GC { vec4 gC[]; };
layout(std430, binding = 5) buffer GGV { float ggrid_v[]; };
layout(push_constant) uniform Args { uint n; uint f; };

void main() {
    uint p = gl_GlobalInvocationID.x;
    if (p >= n) return;
    vec2 xp = x[f * n + p] * INV_DX;
    ivec2 base = ivec2(xp - 0.5);
    vec2 fx = xp - vec2(base);
    vec2 w[3] = vec2[3](0.5 * (1.5 - fx) * (1.5 - fx), 0.75 - (fx - 1.0) * (fx - 1.0),
                        0.5 * (fx - 0.5) * (fx - 0.5));          // quadratic B-spline weights
    vec2 gxp = gx[p];
    vec2 u = gv[p] + DT * gxp;
    vec4 g4 = gC[p];
    mat2 G = mat2(g4.xy, g4.zw);
    const float K = 4.0 * INV_DX;
    vec2 gfx = vec2(0.0);
    vec2 gw[3] = vec2[3](vec2(0.0), vec2(0.0), vec2(0.0));      // (wx[i].grad, wy[i].grad)
    uint node0 = uint(base.x) * GRID + uint(base.y);                // in the (G, G) gradient; + f*G*G in grid_v
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) {
            vec2 dpos = vec2(i, j) - fx;
            uint node = node0 + uint(i) * GRID + uint(j);
            vec2 g = grid_v[f * GRID * GRID + node];
            float weight = w[i].x * w[j].y;
            vec2 Gd = G * dpos;
            vec2 gg = weight * (u + K * Gd);
            atomicAdd(ggrid_v[2 * node], gg.x);
            atomicAdd(ggrid_v[2 * node + 1], gg.y);
            float gweight = dot(u, g) + K * dot(g, Gd);
            gfx -= (K * weight) * (g * G);                          // g * G = G^T g
            gw[i].x += gweight * w[j].y;
            gw[j].y += gweight * w[i].x;
        }
    }
    gfx += gw[0] * (fx - 1.5) - 2.0 * gw[1] * (fx - 1.0) + gw[2] * (fx - 0.5);
    gx[p] = gxp + INV_DX * gfx;
}
