#version 450
// MLS-MPM reverse of p2g at step f (one thread per particle); recomputes the particle's forward quantities.
// On entry gx holds x[f].grad so far (from g2p_grad), gF holds F[f+1].grad; the grid gradients of step f come
// from grid_grad. On exit gx += p2g's part, and gv, gC, gF hold v[f].grad, C[f].grad, F[f].grad (stored).
// Forward (see mpm_p2g.comp): B = I + DT C, M = B F, J = det M, x = M00 + M11, y = M10 - M01, r = sqrt(x^2 + y^2),
// c = x/r, s = y/r, R = [[c, -s], [s, c]], P = M - R, cauchy = 2 MU P M^T + LA (J^2 - J) I,
// A = DT P_VOL 4 INV_DX^2, affine = -A cauchy + P_MASS C, and per node (w = wx[i] wy[j], dpos = (node - fx) DX)
//   grid_v_in += w (P_MASS v + affine dpos),   grid_m += w P_MASS.
// Reverse, with a = grid_v_in.grad and b = grid_m.grad at the node:
//   v.grad      = sum P_MASS w a
//   affine.grad = sum w a dpos^T
//   fx.grad    -= sum DX w affine^T a                               (through dpos)
//   w.grad      = a.(P_MASS v + affine dpos) + b P_MASS;  then wx, wy and fx as in mpm_g2p_grad.comp:
//   wx[i].grad += w.grad wy[j], wy[j].grad += w.grad wx[i], fx.grad += sum_i wx[i].grad dwx[i]/dfx,
//   x.grad     += INV_DX fx.grad
//   C.grad      = P_MASS affine.grad + (the part through M below),   S = cauchy.grad = -A affine.grad
//   stress, X = P M^T: <S, dP M^T + P dM^T> = <S M, dP> + <S^T P, dM>, so
//     P.grad = 2 MU S M,   M.grad = 2 MU S^T P + P.grad,   R.grad = -P.grad
//   J: (LA (J^2 - J) I).grad gives J.grad = LA (2J - 1) tr S, and dJ/dM = [[M11, -M10], [-M01, M00]]
//   polar: dc/dx = y^2/r^3, dc/dy = -xy/r^3, ds/dx = -xy/r^3, ds/dy = x^2/r^3, with c.grad = R00.grad + R11.grad
//     and s.grad = R10.grad - R01.grad:  q = (s.grad x - c.grad y)/r^3,  x.grad = -y q,  y.grad = x q;
//     M00.grad += x.grad, M11.grad += x.grad, M10.grad += y.grad, M01.grad -= y.grad
//   M is stored as F[f+1]: M.grad += F[f+1].grad
//   M = B F:  F.grad = B^T M.grad,  C.grad += DT M.grad F^T
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { vec2 x[]; };
layout(std430, binding = 1) readonly buffer V { vec2 v[]; };
layout(std430, binding = 2) readonly buffer CM { vec4 C[]; };
layout(std430, binding = 3) readonly buffer FM { vec4 F[]; };
layout(std430, binding = 4) readonly buffer GGVIN { vec2 ggrid_v_in[]; };
layout(std430, binding = 5) readonly buffer GGM { float ggrid_m[]; };
layout(std430, binding = 6) buffer GX { vec2 gx[]; };
layout(std430, binding = 7) writeonly buffer GVP { vec2 gv[]; };
layout(std430, binding = 8) writeonly buffer GC { vec4 gC[]; };
layout(std430, binding = 9) buffer GF { vec4 gF[]; };
layout(push_constant) uniform Args { uint n; uint f; };

void main() {
    uint p = gl_GlobalInvocationID.x;
    if (p >= n) return;
    uint row = f * n + p;
    // the forward, again
    vec2 xp = x[row] * INV_DX;
    ivec2 base = ivec2(xp - 0.5);
    vec2 fx = xp - vec2(base);
    vec2 w[3] = vec2[3](0.5 * (1.5 - fx) * (1.5 - fx), 0.75 - (fx - 1.0) * (fx - 1.0),
                        0.5 * (fx - 0.5) * (fx - 0.5));          // quadratic B-spline weights
    vec4 c4 = C[row], f4 = F[row];
    mat2 Cp = mat2(c4.xy, c4.zw), Fp = mat2(f4.xy, f4.zw);
    mat2 B = mat2(1.0) + DT * Cp;
    mat2 M = B * Fp;
    float J = determinant(M);
    float px = M[0][0] + M[1][1], py = M[0][1] - M[1][0];          // M00 + M11, M10 - M01 (M[column][row])
    float rinv = inversesqrt(px * px + py * py);
    float c = px * rinv, s = py * rinv;
    mat2 P = M - mat2(c, s, -s, c);
    const float A = DT * P_VOL * 4.0 * INV_DX * INV_DX;
    mat2 affine = -A * (2.0 * MU * P * transpose(M) + mat2(LA * (J - 1.0) * J)) + P_MASS * Cp;
    vec2 mv = P_MASS * v[row];
    // the scatter's reverse: a gather of the grid gradients
    vec2 ga = vec2(0.0), gfx = vec2(0.0);
    mat2 gaff = mat2(0.0);
    vec2 gw[3] = vec2[3](vec2(0.0), vec2(0.0), vec2(0.0));      // (wx[i].grad, wy[i].grad)
    uint node0 = uint(base.x) * GRID + uint(base.y);                // the grid gradients are single (G, G)
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) {
            vec2 dpos = (vec2(i, j) - fx) * DX;
            uint node = node0 + uint(i) * GRID + uint(j);
            vec2 a = ggrid_v_in[node];
            float weight = w[i].x * w[j].y;
            ga += weight * a;
            gaff += weight * outerProduct(a, dpos);
            gfx -= (DX * weight) * (a * affine);                   // a * affine = affine^T a
            float gweight = dot(a, mv + affine * dpos) + ggrid_m[node] * P_MASS;
            gw[i].x += gweight * w[j].y;
            gw[j].y += gweight * w[i].x;
        }
    }
    gfx += gw[0] * (fx - 1.5) - 2.0 * gw[1] * (fx - 1.0) + gw[2] * (fx - 0.5);
    gx[p] += INV_DX * gfx;
    gv[p] = P_MASS * ga;
    // the stress's reverse
    mat2 S = -A * gaff;
    mat2 gP = 2.0 * MU * S * M;
    mat2 gM = 2.0 * MU * transpose(S) * P + gP;
    float gJ = LA * (2.0 * J - 1.0) * (S[0][0] + S[1][1]);
    gM += gJ * mat2(M[1][1], -M[1][0], -M[0][1], M[0][0]);      // dJ/dM = [[M11, -M10], [-M01, M00]]
    float gc = -(gP[0][0] + gP[1][1]), gs = -(gP[0][1] - gP[1][0]);   // R.grad = -P.grad
    float q = (gs * px - gc * py) * rinv * rinv * rinv;
    float gpx = -py * q, gpy = px * q;
    gM[0][0] += gpx;
    gM[1][1] += gpx;
    gM[0][1] += gpy;                                               // M10
    gM[1][0] -= gpy;                                               // M01
    vec4 gf4 = gF[p];
    gM += mat2(gf4.xy, gf4.zw);
    mat2 gFp = transpose(B) * gM;
    mat2 gCp = P_MASS * gaff + DT * gM * transpose(Fp);
    gF[p] = vec4(gFp[0], gFp[1]);
    gC[p] = vec4(gCp[0], gCp[1]);
}
