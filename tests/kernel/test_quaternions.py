"""Quaternions, as Warp's (q = (x, y, z, w), a vec4): each sp.quat_* in kernels (f32 and f64) and on the host
against an independent float64 numpy reference written from the definitions, the functions cross-checked with
each other and with rotation matrices, and their derivatives (k.grad, sp.Tape, k.fwd) against central finite
differences of the reference."""
import numpy as np
import pytest

import spvad as sp

N_PER_BRANCH = 6   # samples per branch of quat_from_matrix (4 branches)
F64 = {"q": sp.Vector(4, sp.f64), "r": sp.Vector(4, sp.f64), "v": sp.Vector(3, sp.f64), "s": sp.f64,
       "m": sp.Matrix(3, 3, sp.f64)}
F32 = {"q": sp.vec4, "r": sp.vec4, "v": sp.vec3, "s": sp.f32, "m": sp.mat3}


def close(got, want, rtol):
    want = np.asarray(want, dtype=np.float64)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol,
                               atol=rtol * max(float(np.max(np.abs(want))), 1e-30))


# ---- the float64 reference, from the definitions (Warp's formulas, component by component) ----------------
def ref_mul(a, b):
    ax, ay, az, aw = np.moveaxis(a, -1, 0)
    bx, by, bz, bw = np.moveaxis(b, -1, 0)
    return np.stack([aw * bx + bw * ax + ay * bz - by * az, aw * by + bw * ay + az * bx - bz * ax,
                     aw * bz + bw * az + ax * by - bx * ay, aw * bw - ax * bx - ay * by - az * bz], -1)


def ref_conjugate(q):
    return q * np.array([-1.0, -1.0, -1.0, 1.0])


def ref_inverse(q):
    return ref_conjugate(q) / np.sum(q * q, -1, keepdims=True)


def ref_rotate(q, v, sign=1.0):
    """Warp: v (2w^2 - 1) +- 2w (q.v x v) + 2 q.v (q.v . v)."""
    u, w = q[..., :3], q[..., 3:]
    return v * (2 * w * w - 1) + sign * 2 * w * np.cross(u, v) + 2 * u * np.sum(u * v, -1, keepdims=True)


def ref_from_axis_angle(axis, angle):
    return np.concatenate([axis * np.sin(angle / 2)[..., None], np.cos(angle / 2)[..., None]], -1)


def ref_to_matrix(q):
    """Warp: the columns rotate the unit axes."""
    return np.stack([ref_rotate(q, np.broadcast_to(e, q[..., :3].shape)) for e in np.eye(3)], -1)


def ref_from_matrix(m):
    """Shepperd's method, one sample at a time (Warp's branches), normalised."""
    out = []
    for a in m.reshape(-1, 3, 3):
        tr = np.trace(a)
        if tr >= 0:
            h = np.sqrt(tr + 1)
            q = [(a[2, 1] - a[1, 2]) / (2 * h), (a[0, 2] - a[2, 0]) / (2 * h), (a[1, 0] - a[0, 1]) / (2 * h), h / 2]
        else:
            i = 0 if a[0, 0] >= a[1, 1] else 1
            i = 2 if a[2, 2] > a[i, i] else i
            j, k = (i + 1) % 3, (i + 2) % 3
            h = np.sqrt(a[i, i] - a[j, j] - a[k, k] + 1)
            q = [0.0] * 4
            q[i], q[j], q[k], q[3] = h / 2, (a[i, j] + a[j, i]) / (2 * h), (a[k, i] + a[i, k]) / (2 * h), \
                (a[k, j] - a[j, k]) / (2 * h)
        out.append(np.array(q) / np.linalg.norm(q))
    return np.array(out).reshape(m.shape[:-2] + (4,))


def ref_to_axis_angle(q):
    u, w = q[..., :3], q[..., 3]
    n = np.linalg.norm(u, axis=-1)
    return u * (np.sign(w) / n)[..., None], 2 * np.arctan2(n, np.abs(w))


def ref_slerp(q0, q1, t):
    """Warp: q0 from_axis_angle(axis, t angle), (axis, angle) of q0^-1 q1."""
    axis, angle = ref_to_axis_angle(ref_mul(ref_inverse(q0), q1))
    return ref_mul(q0, ref_from_axis_angle(axis, t * angle))


def ref_rpy(roll, pitch, yaw):
    """q_z(yaw) q_y(pitch) q_x(roll), as a product of rotations about the axes."""
    def about(k, a):
        return ref_from_axis_angle(np.broadcast_to(np.eye(3)[k], np.shape(a) + (3,)), a)
    return ref_mul(ref_mul(about(2, yaw), about(1, pitch)), about(0, roll))


def rotation_about(k, a):
    """The numpy rotation matrix about axis k by angle a (right-handed)."""
    c, s = np.cos(a), np.sin(a)
    i, j = (k + 1) % 3, (k + 2) % 3
    r = np.eye(3)
    r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
    return r


def rodrigues(axis, angle):
    k = axis / np.linalg.norm(axis)
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(angle) * kx + (1 - np.cos(angle)) * kx @ kx


# ---- random inputs: unit quaternions away from the branches' edges ------------------------------------------
def unit_quats(rng, n):
    q = rng.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def branch(m):
    tr = np.trace(m)
    return 3 if tr >= 0 else int(np.argmax(np.diag(m)))


def inputs(rng):
    """q, r (unit), v, s and m (rotation matrices), N_PER_BRANCH samples of each quat_from_matrix branch, no
    sample near a branch's edge (trace 0, two equal largest diagonals, w = 0, q^-1 r = +-identity)."""
    picked = {k: [] for k in range(4)}
    while min(len(p) for p in picked.values()) < N_PER_BRANCH:
        q, r = unit_quats(rng, 2)
        m = ref_to_matrix(unit_quats(rng, 1))[0]
        rel = ref_mul(ref_inverse(q), r)
        d = np.sort(np.diag(m))
        if abs(np.trace(m)) < 0.1 or d[2] - d[1] < 0.1 or min(abs(q[3]), abs(rel[3])) < 0.1 or \
                np.linalg.norm(rel[:3]) < 0.1:
            continue
        picked[branch(m)].append((q, r, m))
    rows = [x for k in range(4) for x in picked[k][:N_PER_BRANCH]]
    n = len(rows)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return {"q": np.array([x[0] for x in rows]), "r": np.array([x[1] for x in rows]),
            "v": rng.uniform(-1.5, 1.5, (n, 3)), "s": sign * rng.uniform(0.3, 1.3, n),
            "m": np.array([x[2] for x in rows])}


# ---- one table row per function: the kernel's value of (q, r, v, s, m) and the reference's ------------------
@sp.func
def k_identity(q, r, v, s, m):
    return sp.quat_identity() * s + q * 0.5


@sp.func
def k_mul(q, r, v, s, m):
    return sp.quat_mul(q, r)


@sp.func
def k_conjugate(q, r, v, s, m):
    return sp.quat_conjugate(q)


@sp.func
def k_inverse(q, r, v, s, m):
    return sp.quat_inverse(q * s)   # not a unit quaternion: conj(q) / |q|^2


@sp.func
def k_rotate(q, r, v, s, m):
    return sp.quat_rotate(q, v)


@sp.func
def k_rotate_inv(q, r, v, s, m):
    return sp.quat_rotate_inv(q, v)


@sp.func
def k_from_axis_angle(q, r, v, s, m):
    return sp.quat_from_axis_angle(v, s)


@sp.func
def k_to_matrix(q, r, v, s, m):
    return sp.quat_to_matrix(q)


@sp.func
def k_from_matrix(q, r, v, s, m):
    return sp.quat_from_matrix(m)


@sp.func
def k_slerp(q, r, v, s, m):
    return sp.quat_slerp(q, r, s)


@sp.func
def k_rpy(q, r, v, s, m):
    return sp.quat_rpy(v.x, v.y, v.z)


@sp.func
def k_to_axis_angle(q, r, v, s, m):
    axis, angle = sp.quat_to_axis_angle(q)
    return sp.Vector([axis.x, axis.y, axis.z, angle])   # of the inputs' dtype


# rows computing sin, cos or atan2: in f64 their values and derivatives are compared within TRIG_RTOL, as
# today's f64 transcendentals are accurate to about 1e-6 only (a wrong formula is off by far more)
TRIG = {"quat_from_axis_angle", "quat_slerp", "quat_rpy", "quat_to_axis_angle"}
TRIG_RTOL = 2e-5

ROWS = {  # name: (func, reference of the inputs' dict, output shape)
    "quat_identity": (k_identity, lambda x: np.array([0, 0, 0, 1.0]) * x["s"][:, None] + x["q"] * 0.5, (4,)),
    "quat_mul": (k_mul, lambda x: ref_mul(x["q"], x["r"]), (4,)),
    "quat_conjugate": (k_conjugate, lambda x: ref_conjugate(x["q"]), (4,)),
    "quat_inverse": (k_inverse, lambda x: ref_inverse(x["q"] * x["s"][:, None]), (4,)),
    "quat_rotate": (k_rotate, lambda x: ref_rotate(x["q"], x["v"]), (3,)),
    "quat_rotate_inv": (k_rotate_inv, lambda x: ref_rotate(x["q"], x["v"], -1.0), (3,)),
    "quat_from_axis_angle": (k_from_axis_angle, lambda x: ref_from_axis_angle(x["v"], x["s"]), (4,)),
    "quat_to_matrix": (k_to_matrix, lambda x: ref_to_matrix(x["q"]), (3, 3)),
    "quat_from_matrix": (k_from_matrix, lambda x: ref_from_matrix(x["m"]), (4,)),
    "quat_slerp": (k_slerp, lambda x: ref_slerp(x["q"], x["r"], x["s"]), (4,)),
    "quat_rpy": (k_rpy, lambda x: ref_rpy(*x["v"].T), (4,)),
    "quat_to_axis_angle": (k_to_axis_angle, lambda x: np.concatenate(
        [ref_to_axis_angle(x["q"])[0], ref_to_axis_angle(x["q"])[1][:, None]], -1), (4,)),
}


def out_type(shape, dt):
    return sp.Vector(shape[0], dt) if len(shape) == 1 else sp.Matrix(3, 3, dt)


def value_kernel(f):
    @sp.kernel
    def k(q: sp.Array, r: sp.Array, v: sp.Array, s: sp.Array, m: sp.Array, out: sp.Array):
        for i in range(q.shape[0]):
            out[i] = f(q[i], r[i], v[i], s[i], m[i])
    return k


def loss_kernels(f, shape):
    """(per-sample loss kernel, summed loss kernel): the output contracted with weights w."""
    @sp.func
    def contract(y, w):
        return sp.trace(sp.transpose(w) @ y) if sp.static(len(shape) == 2) else sp.dot(y, w)

    @sp.kernel
    def each(q: sp.Array, r: sp.Array, v: sp.Array, s: sp.Array, m: sp.Array, w: sp.Array, loss: sp.Array):
        for i in range(q.shape[0]):
            loss[i] = contract(f(q[i], r[i], v[i], s[i], m[i]), w[i])

    @sp.kernel
    def total(q: sp.Array, r: sp.Array, v: sp.Array, s: sp.Array, m: sp.Array, w: sp.Array, loss: sp.Array):
        for i in range(q.shape[0]):
            loss[None] += contract(f(q[i], r[i], v[i], s[i], m[i]), w[i])
    return each, total


def device_inputs(x, types, **flags):
    return [sp.from_numpy(x[k].astype(np.float64 if types is F64 else np.float32), dtype=types[k], **flags)
            for k in "qrvsm"]


# ---- values ------------------------------------------------------------------------------------------------
@pytest.mark.backends
@pytest.mark.parametrize("name", sorted(ROWS))
@pytest.mark.parametrize("types", [F32, F64], ids=["f32", "f64"])
def test_value(name, types, rng):
    f, ref, shape = ROWS[name]
    x = inputs(rng)
    dt = sp.f64 if types is F64 else sp.f32
    out = sp.ndarray(out_type(shape, dt), (len(x["q"]),))
    value_kernel(f)(*device_inputs(x, types), out)
    close(out.to_numpy(), ref(x), 3e-6 if types is F32 else TRIG_RTOL if name in TRIG else 1e-12)


# ---- derivatives: k.grad, sp.Tape and k.fwd against central differences of the reference -------------------
def finite_differences(ref, x, wts, h=1e-6):
    """{input: d loss_i / d input_i} per sample (the samples are independent), loss_i = <ref_i, w_i>."""
    def loss(xx):
        return np.sum((ref(xx) * wts).reshape(len(wts), -1), -1)
    grads = {}
    for k in "qrvsm":
        g = np.zeros_like(x[k])
        flat = g.reshape(len(g), -1)
        for c in range(flat.shape[1]):
            step = np.zeros_like(flat)
            step[:, c] = h
            up, down = dict(x), dict(x)
            up[k], down[k] = x[k] + step.reshape(x[k].shape), x[k] - step.reshape(x[k].shape)
            flat[:, c] = (loss(up) - loss(down)) / (2 * h)
        grads[k] = g
    return grads


@pytest.mark.backends
@pytest.mark.parametrize("name", sorted(ROWS))
@pytest.mark.parametrize("types", [F32, F64], ids=["f32", "f64"])
def test_derivatives(name, types, rng):
    f, ref, shape = ROWS[name]
    x = inputs(rng)
    n = len(x["q"])
    wts = rng.uniform(-1, 1, (n,) + shape)
    want = finite_differences(ref, x, wts)
    rtol = 5e-4 if types is F32 else TRIG_RTOL if name in TRIG else 1e-6
    dt = sp.f64 if types is F64 else sp.f32
    assert any(np.max(np.abs(g)) > 0.1 for g in want.values())
    each, total = loss_kernels(f, shape)
    w = sp.from_numpy(wts.astype(dt.np), dtype=out_type(shape, dt))

    args = device_inputs(x, types, needs_grad=True)
    loss = sp.ndarray(dt, (n,), needs_grad=True)
    each(*args, w, loss)
    close(loss.to_numpy(), np.sum((ref(x) * wts).reshape(n, -1), -1), rtol)
    loss.grad.fill(1.0)
    each.grad(*args, w, loss)
    for k, a in zip("qrvsm", args):
        close(a.grad.to_numpy(), want[k], rtol)

    args = device_inputs(x, types, needs_grad=True)
    summed = sp.ndarray(dt, (), needs_grad=True)
    with sp.Tape(loss=summed):
        total(*args, w, summed)
    for k, a in zip("qrvsm", args):
        close(a.grad.to_numpy(), want[k], rtol)

    seeds = {k: rng.uniform(-1, 1, x[k].shape) for k in "qrvsm"}
    args = device_inputs(x, types, needs_dual=True)
    for k, a in zip("qrvsm", args):
        a.dual.from_numpy(seeds[k].astype(dt.np))
    loss = sp.ndarray(dt, (n,), needs_dual=True)
    each.fwd(*args, w, loss)
    directional = sum(np.sum((want[k] * seeds[k]).reshape(n, -1), -1) for k in "qrvsm")
    close(loss.dual.to_numpy(), directional, rtol)


@pytest.mark.backends
def test_slerp_where_the_rotations_agree(rng):
    """q1 = +-q0: q0 itself, and the derivatives of the limit (sin(t theta) / |v| -> t / |w|), finite."""
    x = inputs(rng)
    n = len(x["q"])
    x["r"] = x["q"] * np.where(rng.random(n) < 0.5, -1.0, 1.0)[:, None]
    wts = rng.uniform(-1, 1, (n, 4))
    with np.errstate(invalid="ignore", divide="ignore"):
        want = finite_differences(lambda xx: ref_slerp(xx["q"], xx["r"], xx["s"]), x, wts)
    for k in "vsm":   # unused, and t: at a zero angle the result does not depend on it (0 / 0 in the reference)
        assert np.all(np.isnan(want[k]) | (want[k] == 0))
        want[k] = np.zeros_like(want[k])
    each, _ = loss_kernels(k_slerp, (4,))
    w = sp.from_numpy(wts, dtype=sp.Vector(4, sp.f64))
    args = device_inputs(x, F64, needs_grad=True)
    loss = sp.ndarray(sp.f64, (n,), needs_grad=True)
    each(*args, w, loss)
    close(loss.to_numpy(), np.sum(x["q"] * wts, -1), 1e-12)
    loss.grad.fill(1.0)
    each.grad(*args, w, loss)
    for k, a in zip("qrvsm", args):   # (q^-1 q's vector part is only nearly zero: t's gradient too)
        np.testing.assert_allclose(a.grad.to_numpy(), want[k], rtol=TRIG_RTOL, atol=1e-12)
    args = device_inputs(x, F64, needs_dual=True)
    seeds = {k: rng.uniform(-1, 1, x[k].shape) for k in "qrs"}
    for k, a in zip("qrvsm", args):
        if k in seeds:
            a.dual.from_numpy(seeds[k])
    each.fwd(*args, w, loss := sp.ndarray(sp.f64, (n,), needs_dual=True))
    close(loss.dual.to_numpy(), sum(np.sum((want[k] * seeds[k]).reshape(n, -1), -1) for k in "qrs"), TRIG_RTOL)


# ---- the functions cross-checked, in a kernel and on the host ---------------------------------------------
@sp.kernel
def cross_checks(q: sp.Array, v: sp.Array, s: sp.Array, out: sp.Array):
    for i in range(q.shape[0]):
        qi, vi = q[i], v[i]
        axis, angle = sp.quat_to_axis_angle(sp.quat_from_axis_angle(sp.normalize(vi), s[i]))
        back = sp.quat_from_matrix(sp.quat_to_matrix(qi))
        out[i, 0] = sp.quat_to_matrix(qi) @ vi - sp.quat_rotate(qi, vi)
        out[i, 1] = sp.quat_rotate_inv(qi, sp.quat_rotate(qi, vi)) - vi
        out[i, 2] = (sp.quat_mul(qi, sp.quat_inverse(qi)) - sp.quat_identity(dtype=sp.f64)).xyz
        out[i, 3] = axis * angle - sp.normalize(vi) * s[i]
        out[i, 4] = back.xyz * sp.sign(back.w * qi.w) - qi.xyz
        out[i, 5] = sp.quat_slerp(qi, -qi, s[i]).xyz - qi.xyz   # -q: the same rotation, the shortest path


@pytest.mark.backends
def test_functions_agree_with_each_other(rng):
    x = inputs(rng)
    n = len(x["q"])
    s = rng.uniform(0.2, 3.0, n)   # angles in (0, pi): the round trip keeps axis and angle
    out = sp.ndarray(sp.Vector(3, sp.f64), (n, 6))
    cross_checks(sp.from_numpy(x["q"], dtype=F64["q"]), sp.from_numpy(x["v"], dtype=F64["v"]),
                 sp.from_numpy(s), out)
    errors = np.max(np.abs(out.to_numpy()), axis=(0, 2))
    assert np.all(errors[[0, 1, 2, 4]] < 1e-12) and np.all(errors[[3, 5]] < TRIG_RTOL)


def test_reference_is_the_rotation_it_claims(rng):
    """The reference itself: rotations as numpy matrices (Rodrigues, sandwich product, R_z R_y R_x)."""
    for q in unit_quats(rng, 8):
        axis, angle = ref_to_axis_angle(q)
        r = rodrigues(axis, angle)
        v = rng.normal(size=3)
        assert np.allclose(ref_to_matrix(q), r) and np.allclose(ref_rotate(q, v), r @ v)
        sandwich = ref_mul(ref_mul(q, np.append(v, 0.0)), ref_conjugate(q))
        assert np.allclose(sandwich[:3], r @ v) and np.allclose(ref_rotate(q, v, -1.0), r.T @ v)
    branches = set()
    for q in unit_quats(rng, 200):   # +-q back from its matrix, in each of the four branches
        r = rodrigues(*ref_to_axis_angle(q))
        back = ref_from_matrix(r)
        assert min(np.linalg.norm(back - q), np.linalg.norm(back + q)) < 1e-12
        branches.add(branch(r))
    assert branches == {0, 1, 2, 3}
    roll, pitch, yaw = rng.uniform(-3, 3, 3)
    r = rotation_about(2, yaw) @ rotation_about(1, pitch) @ rotation_about(0, roll)
    assert np.allclose(ref_to_matrix(ref_rpy(roll, pitch, yaw)), r)
    q0, q1 = unit_quats(rng, 2)   # Warp's slerp is the textbook one on unit quaternions (shortest path)
    q1 = q1 if q0 @ q1 >= 0 else -q1
    theta, t = np.arccos(q0 @ q1), 0.3
    textbook = (np.sin((1 - t) * theta) * q0 + np.sin(t * theta) * q1) / np.sin(theta)
    assert np.allclose(ref_slerp(q0, q1, t), textbook) and np.allclose(ref_slerp(q0, -q1, t), textbook)


def test_host_versions(rng):
    x = inputs(rng)
    q, r, v, s, m = (x[k] for k in "qrvsm")
    assert np.array_equal(sp.quat_identity(), [0, 0, 0, 1]) and sp.quat_identity(sp.f64).dtype == np.float64
    for got, want in [(sp.quat_mul(q, r), ref_mul(q, r)), (sp.quat_conjugate(q), ref_conjugate(q)),
                      (sp.quat_inverse(q * 2), ref_inverse(q * 2)), (sp.quat_rotate(q, v), ref_rotate(q, v)),
                      (sp.quat_rotate_inv(q, v), ref_rotate(q, v, -1.0)),
                      (sp.quat_from_axis_angle(v, s), ref_from_axis_angle(v, s)),
                      (sp.quat_to_matrix(q), ref_to_matrix(q)), (sp.quat_from_matrix(m), ref_from_matrix(m)),
                      (sp.quat_slerp(q, r, s), ref_slerp(q, r, s)), (sp.quat_rpy(*v.T), ref_rpy(*v.T)),
                      (sp.quat_to_axis_angle(q)[0], ref_to_axis_angle(q)[0]),
                      (sp.quat_to_axis_angle(q)[1], ref_to_axis_angle(q)[1])]:
        close(got, want, 1e-12)


def _k_quat_is_vec3(q: sp.Array, v: sp.Array, out: sp.Array):
    for i in range(q.shape[0]):
        out[i] = sp.quat_rotate(v[i], v[i])


def _k_vector_is_vec4(q: sp.Array, v: sp.Array, out: sp.Array):
    for i in range(q.shape[0]):
        out[i] = sp.quat_rotate(q[i], q[i])


def _k_one_argument(q: sp.Array, v: sp.Array, out: sp.Array):
    for i in range(q.shape[0]):
        out[i] = sp.quat_mul(q[i])


def _k_matrix_is_vec4(q: sp.Array, v: sp.Array, out: sp.Array):
    for i in range(q.shape[0]):
        out[i] = sp.quat_from_matrix(q[i])


def _k_angle_is_vec3(q: sp.Array, v: sp.Array, out: sp.Array):
    for i in range(q.shape[0]):
        out[i] = sp.quat_from_axis_angle(v[i], v[i])


ERRORS = [
    (_k_quat_is_vec3, "the quaternion q must be a 4-vector, got vec3", "sp.quat_rotate(v[i], v[i])"),
    (_k_vector_is_vec4, "v must be a 3-vector, got vec4", "sp.quat_rotate(q[i], q[i])"),
    (_k_one_argument, "takes 2 arguments, got 1", "sp.quat_mul(q[i])"),
    (_k_matrix_is_vec4, "takes a 3x3 matrix, got vec4", "sp.quat_from_matrix(q[i])"),
    (_k_angle_is_vec3, "angle must be a scalar, got vec3", "sp.quat_from_axis_angle(v[i], v[i])"),
]


@pytest.mark.parametrize("fn,fragment,source", ERRORS, ids=[e[0].__name__[3:] for e in ERRORS])
def test_compile_errors(fn, fragment, source):
    k = sp.kernel(fn)
    with pytest.raises(sp.CompileError) as e:
        k(sp.ndarray(sp.vec4, (2,)), sp.ndarray(sp.vec3, (2,)), sp.ndarray(sp.vec4, (2,)))
    assert fragment in e.value.message and source in e.value.source
    assert e.value.filename.endswith("test_quaternions.py") and e.value.lineno > 0
