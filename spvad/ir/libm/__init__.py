"""spvad's own math library: each transcendental Op as an IR expansion into plain arithmetic, placed after autodiff
(derivatives keep the Op-level rules of autodiff/rules.py) for every backend, the interpreter included, so that
Vulkan and the oracle run the same algorithm and give the same bits. May import: ir, types and errors only.

The interface (stable; the modules below fill it):
- `EXPANSIONS: {Op: fn}`, gathered from the modules' own `EXPANSIONS` dicts: exp_log.py (exp, exp2, expm1,
  log, log2, log10, log1p), pow.py (pow), hyperbolic.py (sinh, cosh, tanh), trig.py (sin, cos, tan, asin, acos,
  atan, atan2) when present, remainder.py (fmod, and float mod: exact), roots.py (rsqrt, hypot). expand.py is
  the pass (`expand_math(kernel) -> kernel`, listed in pipeline.py); vector_eval.py evaluates an expansion over numpy
  arrays as the interpreter computes it (tests/spirv/test_libm_bits.py checks all three agree).
- `fn(e, x[, y]) -> Stmt` places statements with the Emitter `e` (ir/emit.py: `e.const(v, dtype)`,
  `e.compute(op, *args, dtype=None)`) on scalar float statements of one dtype (`x.dtype`, f32 or f64: branch
  in Python, with coefficients per dtype) and returns the result, a statement of that dtype. Const and Compute
  only: no control flow, so both sides of a SELECT are computed (keep the untaken side's operands harmless).
  An expansion may emit another expandable Op (the pass expands what an expansion emits again, so no cycles)
  or call another's function directly (hyperbolic.py calls exp_log.expm1).
- Every statement an expansion emits is computed exactly as written: the pass marks it (`exact`) and moves its
  constants to the top of the task (one per value), SPIR-V decorates it NoContraction also under
  fast_math=True, and the interpreter rounds each op once in its dtype (numpy scalars of the dtype). So: no FMA, no reassociation; plain IEEE add, sub, mul, div and SQRT are
  correctly rounded on both (lavapipe measured); subnormal operands and results are kept, not flushed
  (lavapipe measured, f32 and f64).
- Float-bit ops (ir/ops.py, a row in every per-op table; never differentiated: they appear after autodiff):
  FLOAT_BITS(x): f32 -> i32 its bit pattern; f64 -> i32 its high word (sign, 11 exponent bits, top 20 fraction
  bits). FLOAT_LOW_BITS(x): f64 -> u32 its low word. F32_FROM_BITS(i32) -> f32. F64_FROM_BITS(i32 high,
  u32 low) -> f64. With the integer ops (ADD, SUB, MUL wrapping at 32 bits; BIT_AND/OR/XOR; SHL; SHR,
  arithmetic on i32 and logical on u32, by the amount's low 5 bits; CAST: i32 <-> u32 keep the bits, float ->
  int truncates and saturates, int -> float rounds) these build exponents and scalings (ldexp, frexp).
- arith.py's `Arith(e, like)` spells all of this as method calls (`f.add(a, 1.0)`, `f.where(c, a, b)`,
  `f.poly(coeffs, x)`, `f.high_word(x)`, `f.pow2(k)`, `f.scale(x, k)`, `f.split(x)`).
- The switch: sp.init(native_math=True) / @sp.kernel(native_math=True) leaves the Ops to the driver's
  functions (GLSL.std.450, f64 computed in f32) and the interpreter to numpy: the pass does not run.
"""
from .exp_log import EXPANSIONS as _EXP_LOG
from .hyperbolic import EXPANSIONS as _HYPERBOLIC
from .pow import EXPANSIONS as _POW
from .remainder import EXPANSIONS as _REMAINDER
from .roots import EXPANSIONS as _ROOTS

try:   # written alongside (the trig family): the table works without it, or while its modules are unfinished
    from .trig import EXPANSIONS as _TRIG
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(f"{__name__}."):
        raise
    _TRIG = {}

EXPANSIONS = {**_EXP_LOG, **_POW, **_HYPERBOLIC, **_TRIG, **_REMAINDER, **_ROOTS}
