"""The math library's ulp table (docs/language.md): for each expandable function (ir/libm/, trig included, and the
expansions of ir/math_functions.py built on them) and dtype,
the largest error in ulps of the correctly rounded result (mpmath) over tests/libm_reference.py's dense samples,
of spvad's expansion (as the interpreter and the device compute it: libm.vector_eval) and of the driver's own
functions (native_math=True, run on the device), with the input where each is worst. `fmod` and `%` (ir/libm/
remainder.py) against their exact values (fmod's is a float; `%`'s, fmod + b where the signs differ, is rounded
once), with |a / b| up to 2^46 in f32 and 2^104 in f64, where the expansion is exact (NaN beyond).

Usage: python benchmarks/libm_ulps.py [--n 20000] [--only exp,log,fmod,%] [--no-native]
"""
import argparse
import math
import os
import sys
import time

import mpmath
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import spvad as sp  # noqa: E402
from libm_reference import EXPANDED, GOAL, REFERENCE, expanded_samples, samples, ulp_errors  # noqa: E402
from spvad.ir import math_functions as MF  # noqa: E402
from spvad import types as T  # noqa: E402
from spvad.ir.libm import EXPANSIONS  # noqa: E402
from spvad.ir.libm.vector_eval import evaluate, evaluate_built  # noqa: E402
from spvad.ir.ops import Op  # noqa: E402

REMAINDERS = {"fmod": Op.FMOD, "%": Op.MOD}


@sp.func
def modulo(x, y):
    return x % y


def remainder_samples(dt, n, rng):
    """(a, b): magnitudes log-uniform over the whole range with |a / b| below 2^46 (f32) / 2^104 (f64), where
    the expansion is exact, and small quotients; both signs."""
    f64 = dt == T.f64
    lo, hi, span = (-1074, 1023, 104) if f64 else (-149, 127, 46)
    b = np.exp2(rng.uniform(lo, hi, 2 * n))
    with np.errstate(over="ignore"):
        a = b * np.exp2(np.concatenate([rng.uniform(-10, span - 0.01, n), rng.uniform(0, 8, n)]))
    a, b = (v * rng.choice([-1.0, 1.0], 2 * n) for v in (a, b))
    with np.errstate(over="ignore", under="ignore"):
        a, b = a.astype(dt.np), b.astype(dt.np)
    ok = np.isfinite(a) & (b != 0) & (a != 0) & (np.abs(a) / np.abs(b).astype(np.float64) < 2.0 ** span)
    return [a[ok], b[ok]]


def remainder_errors(name, dt, a, b, got):
    """Ulps of the exact remainder rounded to dt: fmod's is a float (C's fmod in double is exact for f32 and
    f64 operands); `%`'s is fmod + b where the signs differ, rounded once."""
    out = np.zeros(len(got))
    for k in range(len(got)):
        r = math.fmod(float(a[k]), float(b[k]))
        if name == "%" and r != 0 and (r < 0) != (b[k] < 0):
            with mpmath.workprec(24 if dt == T.f32 else 53):   # the sum, rounded once to dt's precision
                r = float(mpmath.mpf(r) + mpmath.mpf(float(b[k])))
        g = float(got[k])
        out[k] = 0.0 if g == r else np.inf if not np.isfinite(g) else abs(g - r) / float(np.spacing(dt.np.type(r)))
    return out


@sp.func
def power(x, y):
    return x ** y


def native_kernel(name, arity):
    """`y[i] = sp.<name>(a[i] [, b[i]])` with the driver's functions (GLSL.std.450)."""
    f = {"pow": power, "%": modulo}.get(name) or getattr(sp, name)
    if arity == 1:
        @sp.kernel(native_math=True)
        def one(a: sp.Array, y: sp.Array):
            for i in range(a.shape[0]):
                y[i] = f(a[i])
        return one

    @sp.kernel(native_math=True)
    def two(a: sp.Array, b: sp.Array, y: sp.Array):
        for i in range(a.shape[0]):
            y[i] = f(a[i], b[i])
    return two


def worst(err, args):
    k = int(np.argmax(err))
    where = ", ".join(f"{a[k]:.9g}" for a in args)
    return f"{err[k]:.3g}", where


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="dense samples per function and dtype (about 2n in all)")
    ap.add_argument("--only", default="", help="comma-separated function names")
    ap.add_argument("--no-native", action="store_true", help="leave out the driver's functions")
    ap.add_argument("--ops-only", action="store_true", help="leave out ir/math_functions.py's expansions")
    args = ap.parse_args()
    names = [n for n in REFERENCE if REFERENCE[n][0] in EXPANSIONS] + list(REMAINDERS) + \
        ([] if args.ops_only else list(EXPANDED))
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    if not args.no_native:
        sp.init()
        device = sp.device_info().get("device_name") or sp.device_info().get("name")
        print(f"native: {device}")
    print("| function | dtype | points | spvad (ulp) | worst at | native (ulp) | worst at | native, normal f32 "
          "operands and results (ulp) | goal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        arity = REFERENCE[name][1] if name in REFERENCE else 2 if name in REMAINDERS else 1
        for dt in (T.f32, T.f64):
            t0 = time.time()
            rng = np.random.default_rng(11)
            if name in REMAINDERS:
                pts = remainder_samples(dt, args.n, rng)
                values = evaluate(REMAINDERS[name], dt, *pts)
                errors = lambda got: remainder_errors(name, dt, *pts, got)   # noqa: E731
            elif name in REFERENCE:
                pts = samples(name, dt, args.n, rng)
                values = evaluate(REFERENCE[name][0], dt, *pts)
                reference = None
            else:
                pts = expanded_samples(name, dt, args.n, rng)
                values = evaluate_built(lambda e, p: MF.FUNCTIONS[name][0](e, p), dt, *pts)
                reference = EXPANDED[name][0]
            if name not in REMAINDERS:
                errors = lambda got: ulp_errors(name, dt, pts, got, reference)   # noqa: E731
            ours = errors(values)
            row = [name, dt.name, str(len(ours)), *worst(ours, pts)]
            if args.no_native:
                row += ["", "", ""]
            else:
                out = sp.ndarray(dt, (len(pts[0]),))
                native_kernel(name, arity)(*(sp.from_numpy(a) for a in pts), out)
                theirs = errors(out.to_numpy())
                # where the operands and the result are normal f32 numbers (or 0): the driver may flush subnormal
                # results, and computes f64 in f32
                f32 = np.finfo(np.float32)
                normal = np.ones(len(values), bool)
                for v in (values, *pts):
                    r = np.abs(v.astype(np.float64))
                    normal &= (r >= f32.tiny) & (r <= f32.max) | (r == 0)
                row += list(worst(theirs, pts)) + [worst(np.where(normal, theirs, 0), pts)[0]]
            print("| " + " | ".join(row + [f"{GOAL[dt]:g}"]) + " |", flush=True)
            if name in REMAINDERS:   # Dekker's split of b overflows above max / 2^(half the fraction's bits)
                top = 2.0 ** (116 if dt == T.f32 else 997)
                below = np.abs(pts[1]) < top
                print(f"  ({name} {dt.name}: {ours[below].max():.3g} ulp over the {below.sum()} points with "
                      f"|b| < 2^{int(np.log2(top))}, {np.isnan(values[~below]).sum()} NaN of {(~below).sum()} above)")
            print(f"  ({name} {dt.name}: {time.time() - t0:.0f} s)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
