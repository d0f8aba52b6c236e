#version 450
// MLS-MPM step f, kernel 2 (one thread per grid node (i, j)): momentum to velocity, gravity, and the walls: a
// velocity component into a wall is cut within BOUND nodes of it. Nodes without mass get velocity 0.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer GVIN { vec2 grid_v_in[]; };
layout(std430, binding = 1) readonly buffer GM { float grid_m[]; };
layout(std430, binding = 2) writeonly buffer GV { vec2 grid_v[]; };
layout(push_constant) uniform Args { uint f; };

void main() {
    uint k = gl_GlobalInvocationID.x;
    if (k >= GRID * GRID) return;
    int i = int(k) / GRID, j = int(k) % GRID;
    uint node = f * GRID * GRID + k;
    float m = grid_m[node];
    vec2 vv = vec2(0.0);
    if (m > 0.0) {
        vv = grid_v_in[node] / m;
        vv.y -= DT * GRAVITY;
        if ((i < BOUND && vv.x < 0.0) || (i > GRID - BOUND && vv.x > 0.0)) vv.x = 0.0;
        if ((j < BOUND && vv.y < 0.0) || (j > GRID - BOUND && vv.y > 0.0)) vv.y = 0.0;
    }
    grid_v[node] = vv;
}
