"""Deep recursion, run safely: the recursive walks of the frontend, the passes and the lowering go a frame or
more per level of nesting, so a kernel nesting an expression hundreds of levels deep (a chain of `**` or of
unary minuses, ifs in ifs) passes Python's recursion limit. `call_with_deep_stack` runs such a call again on a
thread of its own, with a stack large enough for a raised limit: the caller's own stack (a thread's may be
small) and limit never decide whether a kernel compiles. Long `+` / `*` chains need none of it: the frontend
folds them in a loop (frontend/exprs.py visit_BinOp) and the IR is flat. How deep a kernel may nest at all:
frontend/source.py MAX_NESTING, pipeline.py MAX_CONTROL_NESTING."""
import gc
import sys
import threading

# 512 MiB of address space, of which only the pages the recursion touches are used; ~5 KiB a frame at the
# limit, more than a Python frame takes even through C calls (Python 3.11 inlines Python-to-Python calls).
STACK_BYTES = 512 << 20
RECURSION_LIMIT = 100_000

_ONE_AT_A_TIME = threading.Lock()   # the recursion limit is the interpreter's, shared by every thread
_worker = threading.local()


def call_with_deep_stack(fn, *args):
    """fn(*args) on a thread with a STACK_BYTES stack and the recursion limit raised to RECURSION_LIMIT (on the
    calling thread itself when that is such a thread already); its result, or its exception re-raised."""
    if getattr(_worker, "deep", False):
        return fn(*args)
    out = {}

    def run():
        _worker.deep = True
        try:
            out["value"] = fn(*args)
        except BaseException as e:   # (re-raised in the caller's thread)
            out["error"] = e

    with _ONE_AT_A_TIME:
        limit, size, collecting = sys.getrecursionlimit(), threading.stack_size(), gc.isenabled()
        # no garbage collection meanwhile: a finalizer it ran on the thread (a dropped kernel releasing its
        # pipelines) could wait for a lock the caller holds while the caller waits for the thread
        gc.disable()
        try:
            thread = threading.Thread(target=run, name="spvad-deep-stack", daemon=True)
            sys.setrecursionlimit(max(limit, RECURSION_LIMIT))
            try:
                threading.stack_size(STACK_BYTES)   # (read when a thread starts)
                thread.start()
            except (RuntimeError, ValueError) as e:   # no room for such a stack (ulimit -v): no deeper than before
                raise RecursionError(f"no thread with a {STACK_BYTES >> 20} MiB stack could start: {e}") from None
            finally:
                threading.stack_size(size)
            thread.join()
        finally:
            sys.setrecursionlimit(limit)
            if collecting:
                gc.enable()
    if "error" in out:
        raise out.pop("error")
    return out["value"]
