#version 450
// MLS-MPM step f, kernel 1 (one thread per particle): particles to grid, as examples/mpm.py's p2g.
// Particle rows: x, v (vec2) and C, F (2x2 matrices as vec4 in GLSL's column-major mat2 order) of step f at
// [f*n + p]; the grid of step f (momenta grid_v_in as float pairs, masses grid_m) at [f*GRID*GRID + i*GRID + j].
//   M = (I + DT*C) F (stored as F of step f+1), J = det M, R = the rotation of M's polar decomposition,
//   cauchy = 2*MU*(M - R) M^T + LA*(J - 1)*J*I,  affine = -DT*P_VOL*4*INV_DX^2 * cauchy + P_MASS*C,
//   and for the 3x3 nodes around the particle (quadratic B-spline weights w):
//   grid_v_in += w*(P_MASS*v + affine*dpos), grid_m += w*P_MASS (float atomics), dpos = (node - fx)*DX.
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { vec2 x[]; };
layout(std430, binding = 1) readonly buffer V { vec2 v[]; };
layout(std430, binding = 2) readonly buffer CM { vec4 C[]; };
layout(std430, binding = 3) buffer FM { vec4 F[]; };
layout(std430, binding = 4) buffer GVIN { float grid_v_in[]; };
layout(std430, binding = 5) buffer GM { float grid_m[]; };
layout(push_constant) uniform Args { uint n; uint f; };

void main() {
    uint p = gl_GlobalInvocationID.x;
    if (p >= n) return;
    uint row = f * n + p;
    vec2 xp = x[row] * INV_DX;
    ivec2 base = ivec2(xp - 0.5);                       // truncation, as int() (positions are > 0)
    vec2 fx = xp - vec2(base);
    vec2 w[3] = vec2[3](0.5 * (1.5 - fx) * (1.5 - fx), 0.75 - (fx - 1.0) * (fx - 1.0),
                        0.5 * (fx - 0.5) * (fx - 0.5));          // quadratic B-spline weights
    vec4 c4 = C[row], f4 = F[row];
    mat2 Cp = mat2(c4.xy, c4.zw);
    mat2 M = (mat2(1.0) + DT * Cp) * mat2(f4.xy, f4.zw);
    F[row + n] = vec4(M[0], M[1]);
    float J = determinant(M);
    float px = M[0][0] + M[1][1], py = M[0][1] - M[1][0];          // M00 + M11, M10 - M01 (M[column][row])
    float rinv = inversesqrt(px * px + py * py);
    float c = px * rinv, s = py * rinv;
    mat2 R = mat2(c, s, -s, c);                                    // [[c, -s], [s, c]]
    mat2 cauchy = 2.0 * MU * (M - R) * transpose(M) + mat2(LA * (J - 1.0) * J);
    mat2 affine = (-DT * P_VOL * 4.0 * INV_DX * INV_DX) * cauchy + P_MASS * Cp;
    vec2 mv = P_MASS * v[row];
    uint node0 = f * GRID * GRID + uint(base.x) * GRID + uint(base.y);
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) {
            vec2 dpos = (vec2(i, j) - fx) * DX;
            float weight = w[i].x * w[j].y;
            vec2 mom = weight * (mv + affine * dpos);
            uint node = node0 + uint(i) * GRID + uint(j);
            atomicAdd(grid_v_in[2 * node], mom.x);
            atomicAdd(grid_v_in[2 * node + 1], mom.y);
            atomicAdd(grid_m[node], weight * P_MASS);
        }
    }
}
