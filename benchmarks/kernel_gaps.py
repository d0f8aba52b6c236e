"""Device time per kernel of a peers.py workload, spvad against the limit (hand-written GLSL), interleaved in one
process: every pipeline and launch of the workload's spvad and limit ops is recorded once (SPIR-V, buffers, push
constants, groups), then the chosen launches are timed in turn (launches + sync, median of rounds). Edited spvad
modules (`var:NAME=file.spv`, e.g. spirv-dis -> edit -> spirv-as) or limit shaders (`lvar:NAME=file.comp`) run
beside them, which is how a SPIR-V difference is confirmed as a cause. `--tape` compares whole Tapes instead:
the ops as peers.py runs them against raw replays of the device commands they recorded (device work alone).

Usage: python benchmarks/kernel_gaps.py WORKLOAD [--launch K] [--rounds N] [--cases CASE ...] [--tape] [--dump DIR]
  CASE: sp:NAME[#k] (the k-th spvad pipeline of that name: #1 is a kernel's gradient), lim:NAME (limit/NAME),
        var:NAME[#k]=FILE.spv, lvar:NAME=FILE.comp; any of them with @WIDTH re-specialises the workgroup width.
"""
import argparse
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from workloads import limit  # noqa: E402

LOCAL_SIZE_ID = {"sp": 1000, "var": 1000, "lim": 0, "lvar": 0}   # spvad's and the limit's width spec ids


class Recorder:
    """Every pipeline created, the -D defines of every limit shader, and the device commands recorded while
    `commands` is a list (patched into the RHI class and limit.compile_glsl)."""

    def __init__(self):
        from spvad.rhi.vulkan import batches, pipelines, program
        self.pipelines, self.commands, self.defines = [], None, {}
        cls, recorder = program.ProgramMixin, self
        create, launch = pipelines.PipelineMixin.create_pipeline, cls.launch

        def create_pipeline(dev, spirv, **kw):
            p = create(dev, spirv, **kw)
            recorder.pipelines.append(dict(pipeline=p, name=kw["name"], spirv=bytes(spirv), kw=kw, launches=[]))
            return p

        def launch_recorded(dev, pipeline, buffers, push, groups):
            for r in recorder.pipelines:
                if r["pipeline"] is pipeline:
                    r["launches"].append((list(buffers), bytes(push), tuple(groups)))
            return launch(dev, pipeline, buffers, push, groups)
        pipelines.PipelineMixin.create_pipeline, cls.launch = create_pipeline, launch_recorded
        compile_glsl = limit.compile_glsl

        def compile_recorded(name, defines=None):
            recorder.defines[name] = defines
            return compile_glsl(name, defines)
        limit.compile_glsl = compile_recorded
        for name in ("launch", "launch_indirect", "copy_buffer", "copy_regions", "fill_buffer", "fill_buffers"):
            self._log(cls, name)
        self._log(batches.BatchMixin, "run_batch")   # a Tape's backward pass, recorded once
        self._log_prepared(cls, "prepare_launch", "launch")   # (an indirect one calls launch_indirect)

    def _log(self, cls, name):
        inner = getattr(cls, name)

        def logged(dev, *args):
            if self.commands is not None:
                self.commands.append((inner, dev, args))
            return inner(dev, *args)
        setattr(cls, name, logged)

    def _log_prepared(self, cls, name, method):
        """A replay's prepared launches (rhi prepare_launch) send through `method` when commands are logged."""
        prepare, recorder = getattr(cls, name), self

        def prepared(dev, pipeline, buffers, *groups):
            send = prepare(dev, pipeline, buffers, *groups)

            def logged(push):
                if recorder.commands is not None:
                    recorder.commands.append((getattr(cls, method), dev, (pipeline, buffers, push, *groups)))
                return send(push)
            return logged
        setattr(cls, name, prepared)

    def find(self, name, k=0):
        hits = [r for r in self.pipelines if r["name"] == name and r["launches"]]
        if len(hits) <= k:
            sys.exit(f"no pipeline {name!r} #{k}; recorded: {sorted({r['name'] for r in self.pipelines})}")
        return hits[k]


def glsl_variant(path, defines):
    """SPIR-V of an edited limit shader, compiled like the limit's own (with the workload's defines)."""
    sources = limit.SOURCES
    with tempfile.TemporaryDirectory(prefix="kernel-gaps-") as tmp:
        shutil.copy(path, os.path.join(tmp, "variant.comp"))
        limit.SOURCES = tmp
        try:
            return limit.compile_glsl("variant", defines)
        finally:
            limit.SOURCES = sources


def make_case(dev, rec, spec, launch_index):
    """(pipeline, buffers, push constants, groups) of one CASE string."""
    spec, _, path = spec.partition("=")
    kind, _, rest = spec.partition(":")
    rest, _, width = rest.partition("@")
    name, _, k = rest.partition("#")
    r = rec.find(("limit/" if kind in ("lim", "lvar") else "") + name, int(k or 0))
    buffers, push, groups = r["launches"][min(launch_index, len(r["launches"]) - 1)]
    spec_constants = dict(r["kw"].get("spec_constants") or {})
    pipeline = r["pipeline"]
    if path or width:
        if width:
            sid = LOCAL_SIZE_ID[kind]
            threads = groups[0] * groups[1] * spec_constants.get(sid, 512)
            spec_constants[sid] = int(width)
            groups = (-(-threads // int(width)), 1, 1)
        if path.endswith(".comp"):
            code = glsl_variant(path, rec.defines.get(name))
        else:
            code = open(path, "rb").read() if path else r["spirv"]
        pipeline = dev.create_pipeline(code, **{**r["kw"], "spec_constants": spec_constants or None})
    return pipeline, buffers, push, groups


def default_cases(rec):
    """Every recorded pipeline that launched: sp:NAME, sp:NAME#1 (its gradient), ..., lim:NAME."""
    seen, specs = {}, []
    for r in rec.pipelines:
        if r["launches"]:
            k = seen[r["name"]] = seen.get(r["name"], -1) + 1
            limit_name = r["name"].startswith("limit/")
            specs.append(("lim:" + r["name"][6:] if limit_name else "sp:" + r["name"]) + (f"#{k}" if k else ""))
    return specs


def interleaved(cases, rounds, sync, per_sample=1):
    """Median and min milliseconds of each callable per call, all run in turn each round."""
    times = {k: [] for k in cases}
    for _ in range(rounds):
        for k, fn in cases.items():
            sync()
            t = time.perf_counter()
            for _ in range(per_sample):
                fn()
            sync()
            times[k].append((time.perf_counter() - t) * 1e3 / per_sample)
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload")
    ap.add_argument("--launch", type=int, default=0, help="which recorded launch of a pipeline (a step's)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--per-sample", type=int, default=20, help="launches per timed sample")
    ap.add_argument("--cases", nargs="*", help="default: every recorded pipeline")
    ap.add_argument("--tape", action="store_true", help="whole Tapes: the ops vs raw replays of their commands")
    ap.add_argument("--dump", help="write the recorded SPIR-V modules to this folder")
    args = ap.parse_args()
    import spvad as sp
    rec = Recorder()
    W = importlib.import_module(f"workloads.{args.workload}")
    cfg = W.config(False)
    ref = W.reference(cfg)
    ops = {"spvad": {o.name: o for o in W.prepare_spvad(cfg, ref)}}
    ops["limit"] = {o.name: o for o in W.prepare_limit(cfg, ref)}
    tapes = {}
    for system, named in ops.items():
        for op in named.values():
            op.setup and op.setup()
            rec.commands = [] if op.name == "tape fwd+bwd" else None
            op.run()
            op.sync()
            if rec.commands is not None:
                tapes[system], rec.commands = rec.commands, None
    dev = limit.device()
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
        seen = {}
        for r in rec.pipelines:
            k = seen[r["name"]] = seen.get(r["name"], -1) + 1
            with open(os.path.join(args.dump, f"{r['name'].replace('/', '_')}{'#%d' % k if k else ''}.spv"),
                      "wb") as f:
                f.write(r["spirv"])
    if args.tape:
        def replay(commands):
            return lambda: [fn(d, *a) for fn, d, a in commands]
        cases = {f"{s} op": ops[s]["tape fwd+bwd"].run for s in ops}
        cases.update({f"{s} raw commands": replay(tapes[s]) for s in ops})
        per_sample = 1
    else:
        specs = args.cases or default_cases(rec)
        made = {s: make_case(dev, rec, s, args.launch) for s in specs}
        cases = {s: (lambda c: lambda: dev.launch(*c))(c) for s, c in made.items()}
        per_sample = args.per_sample
    result = interleaved(cases, args.rounds, sp.sync, per_sample)
    first = next(iter(result.values()))[0]
    for k, (med, low) in result.items():
        print(f"{k:52s} median {med * 1e3:9.1f} us  min {low * 1e3:9.1f}  x{med / first:5.2f}")


if __name__ == "__main__":
    main()
