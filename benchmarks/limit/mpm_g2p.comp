#version 450
// MLS-MPM step f, kernel 3 (one thread per particle): grid to particles, as examples/mpm.py's g2p:
//   v' = sum w*g, C' = sum 4*INV_DX*w * g dpos^T (dpos = node - fx, in cells), x' = x + DT*v', written to row f+1.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer X { vec2 x[]; };
layout(std430, binding = 1) writeonly buffer V { vec2 v[]; };
layout(std430, binding = 2) writeonly buffer CM { vec4 C[]; };
layout(std430, binding = 3) readonly buffer GV { vec2 grid_v[]; };
layout(push_constant) uniform Args { uint n; uint f; };

void main() {
    uint p = gl_GlobalInvocationID.x;
    if (p >= n) return;
    uint row = f * n + p;
    vec2 x0 = x[row], xp = x0 * INV_DX;
    ivec2 base = ivec2(xp - 0.5);
    vec2 fx = xp - vec2(base);
    vec2 w[3] = vec2[3](0.5 * (1.5 - fx) * (1.5 - fx), 0.75 - (fx - 1.0) * (fx - 1.0),
                        0.5 * (fx - 0.5) * (fx - 0.5));          // quadratic B-spline weights
    vec2 nv = vec2(0.0);
    mat2 nC = mat2(0.0);
    uint node0 = f * GRID * GRID + uint(base.x) * GRID + uint(base.y);
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) {
            vec2 dpos = vec2(i, j) - fx;
            vec2 g = grid_v[node0 + uint(i) * GRID + uint(j)];
            float weight = w[i].x * w[j].y;
            nv += weight * g;
            nC += (4.0 * INV_DX * weight) * outerProduct(g, dpos);
        }
    }
    v[row + n] = nv;
    C[row + n] = vec4(nC[0], nC[1]);
    x[row + n] = x0 + DT * nv;
}
