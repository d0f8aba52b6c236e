"""Derivatives inside kernels: `sp.grad`, `value_and_grad`, `jacobian`, `hessian`, `jvp`, `vjp` of @sp.func
functions, and `sp.stop_gradient`.

The function is inlined once into a Derivative statement (ir/nodes.py). Its active inputs are Seed
statements carrying one tangent per direction: vector forward mode, one direction per active scalar
component (jvp: one direction, the given tangent). The output components' Tangents are stored into local
slots read after the statement. autodiff/inline_derivatives.py expands it into plain IR before any other
pass, so kernel-level autodiff of a kernel using these sees ordinary code (second derivatives).
"""
import math

from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from .vectors import VecValue, shape_words, shaped
from ..ir.ops import Op
from . import funcs
from .rows import one_arg, with_keywords



class Transform:
    """`sp.grad(f, argnums)` & co in a kernel: a compile-time value waiting to be called with f's arguments."""

    def __init__(self, kind, func, argnums, single):
        self.kind, self.func, self.argnums, self.single = kind, func, argnums, single

    @property
    def what(self):
        return f"sp.{self.kind}({self.func.fn.__name__})"


# ---- the rows: sp.grad & co, what they return, sp.jvp / vjp, sp.stop_gradient -------------------------------
def transform_row(name):
    """`sp.grad(f, argnums=...)` & co: a Transform, called next with f's arguments."""
    return with_keywords(lambda b, args, kw: make_transform(b, name, args, kw))


def call_transform(b, fn, args, kw):
    """A Transform called: made in the kernel, or at module level (`dsdf = sp.grad(sdf)`)."""
    made = getattr(fn, "_spvad_transform", None)
    if made is not None:
        name, func, argnums = made
        fn = make_transform(b, name, [func], {"argnums": argnums})
    return apply_transform(b, fn, args, kw)


def forward_or_reverse_row(name):
    """`sp.jvp(f, primals, tangents)` / `sp.vjp(f, primals, cotangent)`."""
    def body(b, args, kw):
        if kw:
            b.error(f"sp.{name}(f, primals, {'tangents' if name == 'jvp' else 'cotangent'}) takes positional "
                    "arguments only")
        if len(args) != 3:
            b.error(f"sp.{name} takes three arguments: a @sp.func, a tuple of primal values and "
                    f"{'a tuple of tangents' if name == 'jvp' else 'a cotangent'}")
        func = check_func(b, name, args[0])
        return (jvp if name == "jvp" else vjp)(b, func, args[1], args[2])
    return with_keywords(body)


def stop_gradient_row(b, args, kw):
    if kw:
        b.error("sp.stop_gradient takes one positional argument")
    return stop_gradient(b, one_arg(b, args, "sp.stop_gradient"))


def check_func(b, name, f):
    if not getattr(f, "_spvad_func", False):
        b.error(f"sp.{name} differentiates @sp.func functions; got {getattr(f, '__name__', type(f).__name__)}")
    return f


def make_transform(b, name, args, kw):
    if len(args) != 1 or set(kw) - {"argnums"}:
        b.error(f"sp.{name}(f, argnums=0) takes a @sp.func and the keyword argnums")
    func = check_func(b, name, args[0])
    argnums = kw.get("argnums", 0)
    single = isinstance(argnums, int) and not isinstance(argnums, bool)
    nums = (argnums,) if single else argnums
    if not isinstance(nums, tuple) or not nums or any(isinstance(k, bool) or not isinstance(k, int) for k in nums):
        b.error(f"sp.{name}: argnums must be an int or a non-empty tuple of ints known at compile time, "
                f"got {argnums!r}")
    positional = len(func.source().tree.args.args)
    for k in nums:
        if not 0 <= k < positional:
            b.error(f"sp.{name}: argnums {k} is out of range for {func.fn.__name__}, which has {positional} "
                    "positional parameters")
    if len(set(nums)) != len(nums):
        b.error(f"sp.{name}: argnums {nums} repeats an argument")
    return Transform(name, func, nums, single)


def stop_gradient(b, v):
    """`v` with no derivative: an identity op whose partial is zero (kernel-level autodiff too)."""
    if isinstance(v, PY_SCALARS):
        return v
    if isinstance(v, VecValue):
        return v.with_comps(stop_gradient(b, c) for c in v.comps)
    if not isinstance(v, N.Stmt):
        b.error(f"sp.stop_gradient takes a scalar, vector or matrix, got {type(v).__name__}")
    return b.compute(Op.STOP_GRADIENT, v) if v.dtype.is_float else v


# ---- values as flat lists of scalar components -----------------------------------------------------------
def flatten(b, v, what):
    """(shape, typed scalar components) of a scalar, vector or matrix value; `what` names it in errors."""
    if isinstance(v, VecValue):
        return v.shape, [b.typed(c) for c in v.comps]
    if isinstance(v, (N.Stmt,) + PY_SCALARS):
        return (), [b.typed(v)]
    if v is None:
        b.error(f"{what} is None (the function returns nothing)")
    b.error(f"{what} must be a scalar, vector or matrix, got {type(v).__name__}")


def rebuild(shape, comps):
    return comps[0] if shape == () else shaped(list(comps), shape)


def float_components(b, v, what):
    shape, comps = flatten(b, v, what)
    for c in comps:
        if not c.dtype.is_float:
            b.error(f"{what} is {c.dtype}: only float values have derivatives")
    return shape, comps


def shape_name(shape):
    return f"a {shape_words(shape)}" if shape else "a scalar"


# ---- the Derivative statement ----------------------------------------------------------------------------
class Result:
    """What a Derivative statement left: the output's shape, its value components (when asked for) and
    `tangents[o][j]`, the tangent of output component o in direction j (in the output's dtype)."""

    def __init__(self, shape, values, tangents):
        self.shape, self.values, self.tangents = shape, values, tangents

    def value(self):
        return rebuild(self.shape, self.values)


def differentiate(b, inputs, width, run, want_value, what, contract=None):
    """Emit a Derivative of `width` directions. `inputs`: (shape, components, seeds per component) of each
    active input, seeds being `width` tangents; `run(seeded values)` emits the function inside the
    statement's body and returns its output. `contract(shape, outputs)`, when given, returns one scalar
    made of the outputs (vjp's <c, f>): the only one differentiated, so that reverse mode takes one sweep.
    Returns a Result; the derivative's slots are read after it."""
    deriv = b.emit(N.Derivative(N.Block(), width))
    saved = b.block
    b.block = deriv.body
    try:
        seeded = [rebuild(shape, [b.emit(N.Seed(c, tuple(s))) for c, s in zip(comps, seeds)])
                  for shape, comps, seeds in inputs]
        shape, outs = float_components(b, run(seeded), f"the result of {what}")
        value_slots = [store(b, o, "value") for o in outs] if want_value else []
        wrt = outs if contract is None else [contract(shape, outs)]
        tangent_slots = [[store(b, b.emit(N.Tangent(o, j)), f"tangent{j}") for j in range(width)] for o in wrt]
    finally:
        b.block = saved
    refuse_array_writes(b, deriv, what)
    load = lambda slot: b.emit(N.LocalLoad(slot))   # noqa: E731
    return Result(shape, [load(s) for s in value_slots], [[load(s) for s in row] for row in tangent_slots])


def store(b, v, name):
    slot = b.new_slot(v.dtype, name)
    b.emit(N.LocalStore(slot, v))
    return slot


def refuse_array_writes(b, deriv, what):
    for s in N.walk(deriv.body):
        if type(s).WRITES_ARRAY:
            b.loc = s.loc
            b.error(f"{what} writes into array '{s.array.name}': a function differentiated inside a kernel may "
                    "read arrays (their values are constants for its derivative) but not write them")


def unit_seeds(b, active):
    """Inputs for differentiate with one direction per component of the `active` (shape, components):
    component i's tangent is 1 in direction i, 0 in the others. Also returns each input's directions."""
    n = sum(len(cs) for _, cs in active)
    consts = {}

    def c(v, dt):
        if (v, dt) not in consts:
            consts[(v, dt)] = b.const(v, dt)
        return consts[(v, dt)]
    inputs, spans, at = [], [], 0
    for shape, cs in active:
        spans.append(range(at, at + len(cs)))
        inputs.append((shape, cs, [[c(1.0 if i == j else 0.0, x.dtype) for j in range(n)]
                                   for i, x in enumerate(cs, at)]))
        at += len(cs)
    return inputs, spans


# ---- sp.grad, value_and_grad, jacobian, hessian ------------------------------------------------------------
def apply_transform(b, t, args, kw):
    src = t.func.source()
    names = [a.arg for a in src.tree.args.args + src.tree.args.kwonlyargs]
    values = funcs.func_arguments(b, t.func, args, kw)   # one per parameter, defaults filled in
    fname = t.func.fn.__name__
    active = []   # (shape, comps) per argnum
    for k in t.argnums:
        active.append(float_components(b, values[k], f"argument {k} ('{names[k]}') of {t.what}"))
    inputs, spans = unit_seeds(b, active)
    width = spans[-1].stop

    def call(seeded):
        vals = list(values)
        for k, v in zip(t.argnums, seeded):
            vals[k] = v
        return funcs.inline(b, t.func, vals)

    what = f"{fname} (in {t.what})"
    if t.kind == "hessian":
        return hessian(b, t, inputs, active, spans, call, what)
    r = differentiate(b, inputs, width, call, t.kind == "value_and_grad", what)
    if t.kind == "jacobian":
        out = tuple(jacobian_block(r, shape, span) for (shape, _), span in zip(active, spans))
        return out[0] if t.single else out
    if r.shape != ():
        b.error(f"{t.what} needs {fname} to return a scalar, but it returns {shape_name(r.shape)} "
                "(use sp.jacobian, sp.jvp or sp.vjp)")
    grads = tuple(rebuild(shape, [b.cast(r.tangents[0][j], c.dtype) for j, c in zip(span, cs)])
                  for (shape, cs), span in zip(active, spans))
    grads = grads[0] if t.single else grads
    return (r.value(), grads) if t.kind == "value_and_grad" else grads


def block_shape(out_shape, in_shape):
    """The shape of d out / d in: out shape + in shape, or, past the 2 dimensions a kernel value has, the
    matrix of their row-major flattenings (a 3x3 matrix function's hessian is 9x9, as FEM codes write it)."""
    shape = out_shape + in_shape
    return shape if len(shape) <= 2 else (math.prod(out_shape), math.prod(in_shape))


def jacobian_block(r, in_shape, span):
    """d output / d input as an array of shape block_shape(output shape, input shape)."""
    return rebuild(block_shape(r.shape, in_shape), [r.tangents[o][j] for o in range(len(r.tangents)) for j in span])


def hessian(b, t, inputs, active, spans, call, what):
    """The jacobian of the gradient: a Derivative inside a Derivative (expanded innermost first)."""
    n = sum(len(cs) for _, cs, _ in inputs)

    def gradient(seeded):   # runs inside the outer Derivative: the inner one's seeds are the outer seeds
        inner = [(shape, rebuild_comps(v), s) for (shape, _, s), v in zip(inputs, seeded)]
        r = differentiate(b, inner, n, call, False, what)
        if r.shape != ():
            b.error(f"{t.what} needs {t.func.fn.__name__} to return a scalar, but it returns "
                    f"{shape_name(r.shape)}")
        return VecValue([r.tangents[0][j] for j in range(n)])

    r = differentiate(b, inputs, n, gradient, False, what)
    blocks = []
    for (shape_i, _), span_i in zip(active, spans):
        row = []
        for (shape_j, _), span_j in zip(active, spans):
            row.append(rebuild(block_shape(shape_i, shape_j), [r.tangents[i][j] for i in span_i for j in span_j]))
        blocks.append(tuple(row))
    return blocks[0][0] if t.single else tuple(blocks)


def rebuild_comps(v):
    return list(v.comps) if isinstance(v, VecValue) else [v]


# ---- sp.jvp, sp.vjp -----------------------------------------------------------------------------------------
def call_with(b, func):
    """`run` for differentiate: `func` inlined with the seeded primals as its positional arguments."""
    return lambda seeded: funcs.inline(b, func, funcs.func_arguments(b, func, list(seeded), {}))


def as_float(v):
    """A Python int tangent or cotangent (`0` for `0.0`) is a float, as it would be in numpy."""
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


def primal_tuple(b, name, primals):
    if not isinstance(primals, tuple) or not primals:
        b.error(f"sp.{name}: the primals must be a non-empty tuple of the function's arguments, e.g. (p, r)")
    return [float_components(b, v, f"primal {k} of sp.{name}") for k, v in enumerate(primals)]


def jvp(b, func, primals, tangents):
    """(f(*primals), J t): one forward direction seeded with the tangents."""
    active = primal_tuple(b, "jvp", primals)
    if not isinstance(tangents, tuple) or len(tangents) != len(active):
        b.error(f"sp.jvp: the tangents must be a tuple with one tangent per primal ({len(active)})")
    inputs = []
    for k, ((shape, comps), tangent) in enumerate(zip(active, tangents)):
        tshape, tcomps = float_components(b, as_float(tangent), f"tangent {k} of sp.jvp")
        if tshape != shape:
            b.error(f"sp.jvp: tangent {k} is {shape_name(tshape)} but its primal is {shape_name(shape)}")
        inputs.append((shape, comps, [[b.cast(tc, c.dtype)] for tc, c in zip(tcomps, comps)]))
    what = f"{func.fn.__name__} (in sp.jvp)"
    r = differentiate(b, inputs, 1, call_with(b, func), True, what)
    return r.value(), rebuild(r.shape, [row[0] for row in r.tangents])


def vjp(b, func, primals, cotangent):
    """(f(*primals), J^T c for each primal): the derivative of <c, f> along a direction per component (in
    reverse mode, when it is wider than a few directions: one sweep)."""
    active = primal_tuple(b, "vjp", primals)
    inputs, spans = unit_seeds(b, active)
    what = f"{func.fn.__name__} (in sp.vjp)"
    cshape, ccomps = float_components(b, as_float(cotangent), "the cotangent of sp.vjp")

    def contract(shape, outs):   # <c, f> = sum_o c_o f_o, the cotangent a constant of the derivative
        if cshape != shape:
            b.error(f"sp.vjp: the cotangent is {shape_name(cshape)} but {func.fn.__name__} returns "
                    f"{shape_name(shape)}")
        return b.sum_of([b.binop("*", b.cast(c, o.dtype), o) for c, o in zip(ccomps, outs)])
    r = differentiate(b, inputs, spans[-1].stop, call_with(b, func), True, what, contract)
    row = r.tangents[0]
    return r.value(), tuple(rebuild(shape, [b.cast(row[j], c.dtype) for j, c in zip(span, cs)])
                            for (shape, cs), span in zip(active, spans))


CALLS = {"grad": transform_row("grad"), "value_and_grad": transform_row("value_and_grad"),
         "jacobian": transform_row("jacobian"), "hessian": transform_row("hessian"),
         "jvp": forward_or_reverse_row("jvp"), "vjp": forward_or_reverse_row("vjp"),
         "stop_gradient": with_keywords(stop_gradient_row)}
