"""Command line: `python -m spvad info` (the device) and `python -m spvad dump FILE.py:KERNEL [--args ...]`
(a kernel's IR, gradient IR, SPIR-V disassembly and spirv-val's verdict)."""
import argparse
import importlib.util
import json
import sys

from . import runtime
from . import types as T
from .errors import SpvadError
from .frontend import ArraySpec
from .ir.printer import format_kernel
from .spirv import tools

DTYPES = {d.name: d for d in T.ALL}


def parse_specs(kernel, text):
    """`--args f32:1,f32:2,i32` (dtype:ndim for arrays, a dtype for scalars); default from annotations."""
    from .lang import Array, Template
    if text:
        specs = []
        for item in text.split(","):
            name, _, ndim = item.strip().partition(":")
            dt = DTYPES[name]
            specs.append(ArraySpec(dt, int(ndim), needs_grad=dt.is_float) if ndim else dt)
        return specs
    specs = []
    for name, ann in kernel.params:
        if ann is Array or ann is None or isinstance(ann, Template):   # sp.template(): as an array
            specs.append(ArraySpec(T.f32, 1, needs_grad=True))
        else:
            specs.append({float: T.f32, int: T.i32, bool: T.u1}.get(ann, ann))
    return specs


def load_kernel(target):
    path, _, name = target.rpartition(":")
    if not path:
        raise SystemExit("usage: python -m spvad dump FILE.py:KERNEL")
    spec = importlib.util.spec_from_file_location("spvad_dump_target", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    k = getattr(module, name, None)
    if k is None or not hasattr(k, "_compiled"):
        raise SystemExit(f"{path} has no @sp.kernel named {name}")
    return k


def dump(target, args_text):
    k = load_kernel(target)
    specs = parse_specs(k, args_text)
    for mode in ("primal", "reverse"):
        print(f"==== {mode} IR ====")
        try:
            ck = k._compiled(specs, mode)
        except SpvadError as e:
            print(f"({mode} not available: {e})")
            continue
        print(format_kernel(ck.ir))
        for t in ck.tasks:
            print(f"==== {mode} SPIR-V: task {t.task.name} ====")
            print(tools.disassemble(t.lowered.spirv))
            try:
                tools.validate(t.lowered.spirv, kernel_name=t.task.name)
                print("spirv-val: OK")
            except SpvadError as e:
                print(f"spirv-val: FAILED\n{e}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m spvad")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="print the device spvad selects")
    d = sub.add_parser("dump", help="print a kernel's IR, gradient IR, SPIR-V and spirv-val's verdict")
    d.add_argument("target", help="FILE.py:KERNEL")
    d.add_argument("--args", default="", help="argument types, e.g. f32:1,f32:2,i32 (dtype:ndim for arrays)")
    a = ap.parse_args(argv)
    if a.cmd == "info":
        print(json.dumps(runtime.device_info(), indent=2, default=str))
    else:
        dump(a.target, a.args)
    runtime.reset()


if __name__ == "__main__":
    main()
