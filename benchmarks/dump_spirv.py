"""Compares the SPIR-V that spvad trees emit: every module lowered while the peer workloads
(benchmarks/workloads/*.py, quick configs), the examples (short runs) and a few test files run, in order,
one fresh process per tree, without the disk cache (so the tests that need it fail here: no matter). For A/B
of compiler changes that should not alter the code.

Usage: python benchmarks/dump_spirv.py --trees A,B [--tests FILE[,FILE...]] [--out DIR]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ("integrator", "mass_spring", "mpm", "elementwise", "launch")   # (electric_long: examples/electric)
EXAMPLES = [("demo", []), ("mpm", ["--steps", "6", "--iters", "1"]), ("electric", ["--steps", "8", "--iters", "1"]),
            ("sdf_normals", ["--size", "8", "--iters", "1"])]
TESTS = ("tests/spirv/test_lower_vectors.py", "tests/spirv/test_lower.py", "tests/spirv/test_lower_bounds.py",
         "tests/autodiff/test_adstack.py", "tests/autodiff/test_dynamic_loops.py", "tests/autodiff/test_op_gradients.py",
         "tests/tape/test_tape_plans.py", "tests/fwdmode")


def child(out, tests):
    """One process: runs everything with lower_task wrapped; writes [name, sha256, size] per module to `out`."""
    import runpy
    import spvad.pipeline as pipeline
    modules, context = [], ["?"]
    dump_dir = out + ".d"
    os.makedirs(dump_dir, exist_ok=True)
    lower_task = pipeline.lower_task

    def recording(kernel, task, **options):
        low = lower_task(kernel, task, **options)
        for part, m in (("", low), (" tail", low.tail)):
            if m is not None:
                name = f"{context[0]}: {kernel.name} {task.name}{part} #{len(modules)}"
                with open(os.path.join(dump_dir, f"{len(modules):05d}.spv"), "wb") as f:
                    f.write(m.spirv)
                modules.append([name, hashlib.sha256(m.spirv).hexdigest(), len(m.spirv)])
        return low

    pipeline.lower_task = recording
    sys.path.insert(0, os.path.dirname(HERE))
    import importlib
    for name in WORKLOADS:
        context[0] = f"workload {name}"
        mod = importlib.import_module(f"benchmarks.workloads.{name}")
        if "spvad" not in getattr(mod, "SYSTEMS", ("spvad",)):
            continue
        cfg = mod.config(True)
        for op in mod.prepare_spvad(cfg, mod.reference(cfg) if hasattr(mod, "reference") else None):
            if op.setup:
                op.setup()
            op.run()
            op.sync()
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in EXAMPLES:
            context[0] = f"example {name}"
            sys.argv = [name] + args + (["--picture", os.path.join(tmp, "p.png")] if name != "demo" else [])
            os.chdir(tmp)
            try:
                runpy.run_path(os.path.join(os.path.dirname(HERE), "examples", f"{name}.py"), run_name="__main__")
            finally:
                os.chdir(cwd)
    if tests:
        import pytest

        class Context:
            @pytest.hookimpl(tryfirst=True)
            def pytest_runtest_setup(self, item):
                context[0] = item.nodeid

        pytest.main(["-q", "-p", "no:cacheprovider", *tests], plugins=[Context()])
    with open(out, "w") as f:
        json.dump(modules, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", required=True, help="comma-separated spvad checkouts")
    ap.add_argument("--tests", default=",".join(TESTS), help="comma-separated test files ('' for none)")
    ap.add_argument("--out", default=None, help="keep each tree's modules here (DIR/N.json, DIR/N.json.d/*.spv)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    tests = [t for t in args.tests.split(",") if t]
    if args.child:
        return child(args.child, tests)
    trees = [os.path.abspath(t) for t in args.trees.split(",")]
    out = args.out or tempfile.mkdtemp(prefix="dump-spirv-")
    results = []
    for k, tree in enumerate(trees):
        path = os.path.join(out, f"{k}.json")
        env = dict(os.environ, PYTHONPATH=tree, SPVAD_CACHE="0")
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--trees", tree, "--tests", ",".join(tests),
                            "--child", path], env=env, cwd=tree, capture_output=True, text=True, timeout=3000)
        if not os.path.exists(path):
            raise RuntimeError(f"child failed in {tree}: {p.stdout[-2000:]}{p.stderr[-2000:]}")
        with open(path) as f:
            results.append(json.load(f))
        print(f"{tree}: {len(results[-1])} modules ({path}.d)")
    base = results[0]
    for tree, got in zip(trees[1:], results[1:]):
        differ = [(a[0], a[2], b[2]) for a, b in zip(base, got) if a[1] != b[1]]
        names = [(a[0], b[0]) for a, b in zip(base, got) if a[0] != b[0]]
        print(f"{tree} vs {trees[0]}: {len(got)} vs {len(base)} modules, {len(differ)} differ, "
              f"{len(names)} named differently")
        for name, n0, n1 in differ[:40]:
            print(f"  differs: {name} ({n0} -> {n1} bytes)")
        for a, b in names[:10]:
            print(f"  order: {a} | {b}")


if __name__ == "__main__":
    main()
