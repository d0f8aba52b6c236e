"""Random loop nests against Python's own run of the same code: on a driver with a loop cap, a launch either
gives Python's value or raises "stopped a loop" (spirv/loop_cap.py leaves the check out only where the bounds
prove it unneeded; spirv/lower_loop_cut.py sees where the driver ran out); never a value cut short in silence."""
import importlib.util
import re
import textwrap

import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.spirv.lower import LOOP_ITERATION_CAP as CAP

PROGRAMS = 48
FOR = re.compile(r"^(\s*)for (\w+) in range\((.*)\):$")
BOUNDS = ("n", "m", "3", "n - m", "n // 2 + 1", "m % 7", "c", "n + {outer}", "{outer}", "{outer} * 3")


class _Budget(Exception):
    pass


def _statements(rng, depth, outer, in_loop):
    """Lines of a random block (4-space indented relative to it)."""
    lines = []
    for _ in range(int(rng.integers(1, 4))):
        kind = rng.choice(["add", "count", "loop", "loop", "if", "max", "break"] if in_loop else
                          ["add", "count", "loop", "loop", "if", "max"])
        if kind == "add":
            lines.append("v += 1.0")
        elif kind == "max":   # a float atomic max: a compare-exchange loop, both threads on one address
            lines.append("sp.atomic_max(y[0], v)")
        elif kind == "count":
            lines.append(f"c += {int(rng.integers(1, 3))}")
        elif kind == "break":
            lines.append(f"if v > {float(rng.integers(5, 5000))}:")
            lines.append("    break")
        elif kind == "if" and depth < 3:
            cond = f"{outer[-1]} % 2 == 0" if outer else "n > m"
            lines.append(f"if {cond}:")
            lines += ["    " + ln for ln in _statements(rng, depth + 1, outer, in_loop)]
        elif kind == "loop" and depth < 3:
            choices = [b for b in BOUNDS if "{outer}" not in b or outer]
            bound = str(rng.choice(choices)).format(outer=outer[-1] if outer else "")
            name = f"a{depth}"
            lines.append(f"for {name} in range({bound}):")
            lines.append("    v += 1.0")   # every loop changes the result: none is dead code the compiler drops
            lines += ["    " + ln for ln in _statements(rng, depth + 1, outer + [name], True)]
    return lines or ["v += 1.0"]


def _program(seed):
    rng = np.random.default_rng(seed)
    body = "\n".join(_statements(rng, 0, [], False))
    counted = "\n".join(FOR.sub(r"\1for \2 in _counted(range(\3)):", ln).replace("sp.atomic_max(y[0], v)", "_max(v)")
                        for ln in body.splitlines())
    return f'''import spvad as sp


@sp.kernel
def nest(x: sp.Array, y: sp.Array, n: sp.i32, m: sp.i32):
    for t in range(x.shape[0]):
        v = 0.0
        c = 0
{textwrap.indent(body, " " * 8)}
        x[t] = v


def reference(n, m, _counted, _max):
    v = 0.0
    c = 0
{textwrap.indent(counted, " " * 4)}
    return v
'''


def _load(tmp_path, seed):
    path = tmp_path / f"nest_{seed}.py"
    path.write_text(_program(seed))
    spec = importlib.util.spec_from_file_location(f"nest_{seed}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python_run(module, n, m, budget):
    """Python's values of x and y and its loop headers (k + 1 per loop of k iterations, as lavapipe counts; 2
    per atomic max), or None past `budget` headers."""
    headers, best = [0], [-1.0]

    def counted(r):
        for value in r:
            headers[0] += 1
            if headers[0] > budget:
                raise _Budget()
            yield value
        headers[0] += 1

    def maximum(v):
        headers[0] += 2
        best[0] = max(best[0], v)

    try:
        return (module.reference(n, m, counted, maximum), best[0]), headers[0]
    except _Budget:
        return None, headers[0]


@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_random_loop_nests_give_pythons_value_or_the_loop_cap_error(seed, tmp_path):
    cap = runtime.get().device.info["limits"].get("max_loop_iterations", 0)
    if not cap:   # (and these nests run up to 10**14 steps: only a capped driver stops them)
        pytest.skip("this driver has no loop-iteration cap")
    module = _load(tmp_path, seed)
    rng = np.random.default_rng(1000 + seed)
    x, y = sp.ndarray(sp.f32, (2,)), sp.ndarray(sp.f32, (1,))
    for _ in range(4):   # launches of one kernel with other scalars: replays decide again
        n, m = (int(rng.choice([rng.integers(0, 20), rng.integers(50, 400), rng.integers(20_000, 70_000)]))
                for _ in range(2))
        want, headers = _python_run(module, n, m, budget=40 * CAP)
        y.fill(-1.0)
        module.nest(x, y, n, m)
        try:
            got = x.to_numpy().tolist(), float(y.to_numpy()[0])
        except sp.DeviceError as e:   # the vector's steps (masked passes too) are above the headers here
            assert "stopped a loop" in str(e)
            assert cap and headers >= cap // 4, f"n={n} m={m}: flagged at {headers} headers"
            continue
        if want is None:
            pytest.fail(f"n={n} m={m}: over {headers} loop headers ran without the loop-cap error "
                        f"(got {got})\n{_program(seed)}")
        assert got == ([want[0]] * 2, want[1]), f"n={n} m={m}: no error, a wrong value\n{_program(seed)}"
