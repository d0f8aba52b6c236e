"""What a launch binds for a kernel's global names (module-level or closure ndarrays, Taichi-field style):
the arrays the names refer to at that launch, Python's rule. A compiled kernel records each name with the
array type it was compiled for (frontend/exprs.py); a name re-bound to another array of that type needs no
compile, one bound to another type selects (or compiles) another variant."""
from .. import runtime
from ..errors import ArgumentError, CompileError
from ..frontend.values import array_type

_UNBOUND = object()


def binds(ck, captured=None):
    """Whether `ck` was compiled for the ndarrays its global names refer to now (or for `captured`, the
    objects a recorded launch bound)."""
    if not ck.captured:   # most kernels: nothing to look up
        return not captured
    if captured is None:
        return all(array_type(site.get()) == kind for _, site, kind in ck.captured)
    return len(captured) == len(ck.captured) and all(
        array_type(a) == kind for a, (_, _, kind) in zip(captured, ck.captured))


def captured_now(kernel_name, ck):
    """The ndarrays a launch of `ck` binds for its global names: those the names refer to now."""
    rt, out = runtime.get(), []
    for _, site, _ in ck.captured:
        obj = site.get()
        if obj._runtime is not rt:
            raise ArgumentError(f"kernel {kernel_name}: the global ndarray '{site.name}' was created before "
                                "sp.reset()/sp.init(); create it again")
        out.append(obj)
    return out


def note_rebound(error, kernel_name, variants):
    """CompileError `error`, saying which global name an earlier compile (`variants`) read an ndarray through
    and which now refers to something else (a notebook cell that re-bound it, `del`)."""
    for ck in variants:
        for _, site, _ in ck.captured:
            now = site.get(_UNBOUND)
            if not getattr(now, "_spvad_ndarray", False):
                what = "is no longer defined" if now is _UNBOUND else f"now refers to a {type(now).__name__}"
                return CompileError(f"{error.message} (the global name '{site.name}' referred to an ndarray at "
                                    f"an earlier launch of kernel {kernel_name} and {what})",
                                    error.filename, error.lineno, error.source)
    return error
