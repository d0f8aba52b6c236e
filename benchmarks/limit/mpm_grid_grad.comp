#version 450
// MLS-MPM reverse of the grid update at step f (one thread per grid node). Forward, where m > 0:
//   v = grid_v_in/m - (0, DT*GRAVITY), a component cut to 0 at a wall it moves into; elsewhere v = 0.
// Reverse, with h = grid_v.grad and h's cut components set to 0 (the cut is decided on v before the cut):
//   grid_v_in.grad = h/m,   grid_m.grad = -(h.grid_v_in)/m^2;   both 0 where m = 0.
// Both are stored (nothing adds to them but this); grid_v.grad is cleared for the next step's g2p_grad.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer GVIN { vec2 grid_v_in[]; };
layout(std430, binding = 1) readonly buffer GM { float grid_m[]; };
layout(std430, binding = 2) buffer GGV { vec2 ggrid_v[]; };
layout(std430, binding = 3) writeonly buffer GGVIN { vec2 ggrid_v_in[]; };
layout(std430, binding = 4) writeonly buffer GGM { float ggrid_m[]; };
layout(push_constant) uniform Args { uint f; };

void main() {
    uint k = gl_GlobalInvocationID.x;
    if (k >= GRID * GRID) return;
    int i = int(k) / GRID, j = int(k) % GRID;
    uint node = f * GRID * GRID + k;
    float m = grid_m[node];
    vec2 h = ggrid_v[k];
    ggrid_v[k] = vec2(0.0);
    vec2 gin = vec2(0.0);
    float gm = 0.0;
    if (m > 0.0) {
        vec2 mom = grid_v_in[node];
        vec2 vv = mom / m;
        vv.y -= DT * GRAVITY;
        if ((i < BOUND && vv.x < 0.0) || (i > GRID - BOUND && vv.x > 0.0)) h.x = 0.0;
        if ((j < BOUND && vv.y < 0.0) || (j > GRID - BOUND && vv.y > 0.0)) h.y = 0.0;
        gin = h / m;
        gm = -dot(h, mom) / (m * m);
    }
    ggrid_v_in[k] = gin;
    ggrid_m[k] = gm;
}
