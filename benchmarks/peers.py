"""spvad against its peers, Taichi 1.7.4 and Quadrants, and against the limit (hand-written GLSL run through
spvad's own RHI, benchmarks/limit/), on the same Vulkan device in one process: five workloads
(benchmarks/workloads/), each system's values and gradients checked against float64 numpy references (a wrong
one is reported as WRONG, not as a time), then a table of median times and ratios (spvad / other), headed by
the device and the CPU model, and a JSON file in benchmarks/results/.

Usage: python benchmarks/peers.py [--quick] [--gpu] [--only NAME[,NAME]] [--repeat R] [--json PATH]
                                  [--markdown PATH] [--no-install]
                                  [--systems spvad,limit,taichi,quadrants,numpy,jax,torch,torch-compile,cuda,
                                             quadrants-cuda]
Taichi and Quadrants are pip-installed into this interpreter's environment when missing (so the test suite never
needs them); a peer that cannot be installed, imported or started on Vulkan is reported as UNAVAILABLE. jax,
torch and cuda (hand-written CUDA C through CuPy) run on their own default device (workloads/frameworks.py);
quadrants-cuda is Quadrants on CUDA, timed in a pass of its own (one Quadrants runtime per process).
--gpu picks sizes that fill a large GPU (GPU_SIZES) instead of lavapipe-sized ones.
"""
import argparse
import gc
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
import warnings

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")   # lavapipe warns without one
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

warnings.filterwarnings("ignore", message=".*Template mapper caching disabled")   # Quadrants, untimed fills
from workloads import (batch, common, compile_latency, elementwise, frameworks, integrator, launch,  # noqa: E402
                       limit, mass_spring, mpm, reduce)

WORKLOADS = (integrator, elementwise, mass_spring, mpm, launch, compile_latency, batch, reduce)
ALL_SYSTEMS = common.SYSTEMS + ("numpy",) + frameworks.SYSTEMS + ("quadrants-cuda",)
# sizes that fill an H100 (132 SMs x 2,048 threads = 270k threads): merged over each workload's full config
GPU_SIZES = {"integrator": {"threads": 1 << 20}, "elementwise": {"n": 1 << 28},
             "mass_spring": {"grid": 96}, "mpm": {"side": 512}}   # mass_spring: its float64 reference is numpy
PEERS = {"taichi": ("taichi", "taichi==1.7.4", "1.7.4"), "quadrants": ("quadrants", "quadrants", None)}
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


# ---- peers: install when missing, then probe Vulkan in a child (a native crash there cannot take us down) --
def installed_version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def ensure_installed(system, allow_install):
    """None when the peer is importable at the wanted version, else the reason it is not."""
    dist, spec, want = PEERS[system]
    have = installed_version(dist)
    if have is not None and (want is None or have == want):
        return None
    if not allow_install:
        return f"{dist} not installed (--no-install)" if have is None else f"{dist} {have} installed, want {want}"
    print(f"installing {spec} into {sys.prefix} ...", file=sys.stderr, flush=True)
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", spec], capture_output=True, text=True)
    importlib.invalidate_caches()
    if p.returncode != 0:
        lines = [ln for ln in (p.stderr + p.stdout).splitlines() if ln.strip() and "is ignored" not in ln]
        return f"pip install {spec} failed: {lines[-1] if lines else p.returncode}"
    return None


def probe(system):
    """None when `system` starts on Vulkan in a fresh process, else why not."""
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe", system], capture_output=True,
                           text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "starting on Vulkan timed out (300 s)"
    if p.returncode == 0 and "PROBE OK" in p.stdout:
        return None
    fails = [ln[len("PROBE FAIL "):] for ln in p.stdout.splitlines() if ln.startswith("PROBE FAIL ")]
    lines = [ln.strip() for ln in (p.stdout + p.stderr).splitlines() if ln.strip() and not ln.startswith("[")]
    return (fails or lines or [f"exit code {p.returncode} (signal {-p.returncode})" if p.returncode < 0
                               else f"exit code {p.returncode}"])[-1]


def probe_child(system):
    try:
        if system == "spvad":
            common.init_spvad()
        else:
            common.init_peer(system, arch="cuda" if system == "quadrants-cuda" else "vulkan")
        print("PROBE OK", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"PROBE FAIL {e}", flush=True)
        sys.exit(1)


def cpu_model():
    """The CPU's model name (lscpu's "Model name", else /proc/cpuinfo), family and model numbers (a VM may show
    only "AMD EPYC") and logical CPU count: on lavapipe the CPU is the device, and llvmpipe's code runs at very
    different speeds on different cores."""
    fields = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, env={**os.environ, "LC_ALL": "C"})
        lines = out.stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        lines = []
    if not any(ln.startswith("Model name") for ln in lines):
        try:
            with open("/proc/cpuinfo") as f:
                lines = f.read().split("\n\n")[0].splitlines()       # the first processor's block
        except OSError:
            pass
    for ln in lines:
        key, _, value = ln.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    name = fields.get("model name") or platform.processor() or "unknown CPU"
    family = fields.get("cpu family")
    numbers = f"family {family} model {fields.get('model')}, " if family else ""
    return f"{name} ({numbers}{os.cpu_count()} logical CPUs)"


# ---- running ---------------------------------------------------------------------------------------------
def run_workload(wl, systems, unavailable, args, rows):
    """Prepare every available system (arrays, kernels), then time each operation with all of them alive, so
    their repetitions can be interleaved; a system that fails to prepare is reported for every operation."""
    cfg = workload_config(wl, args)
    print(f"[{wl.NAME}] {wl.title(cfg)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    ref = wl.reference(cfg)
    systems = [s for s in systems if runs(s, wl)]
    prepared, start = {}, len(rows)
    try:
        for system in systems:
            if system in unavailable:
                rows += [common.row(wl.NAME, op, system, "UNAVAILABLE", detail=unavailable[system]) for op in wl.OPS]
            elif wl is compile_latency:   # every system at once below: their processes alternate
                continue
            else:
                try:
                    prepared[system] = {op.name: op for op in prepare(wl, system, cfg, ref)}
                except common.Unavailable as e:
                    rows += [common.row(wl.NAME, op, system, "UNAVAILABLE", detail=str(e)) for op in wl.OPS]
                except Exception as e:  # noqa: BLE001 - one failing system must not stop the others
                    rows += [common.row(wl.NAME, op, system, "ERROR", detail=common.describe(e)) for op in wl.OPS]
        if wl is compile_latency:
            rows += wl.run([s for s in systems if s not in unavailable], cfg, os.path.abspath(__file__))
        for op in wl.OPS:
            ops = {system: p[op] for system, p in prepared.items() if op in p}
            rows += common.bench(wl.NAME, op, ops, args.repeat)
    finally:
        prepared.clear()
        if "limit" in systems:
            limit.release()
        for system in systems:
            if system in common.PEER_MODULES and system not in unavailable:
                common.release_peer(system)
        gc.collect()
    order = {s: i for i, s in enumerate(systems)}
    rows[start:] = sorted(rows[start:], key=lambda r: (wl.OPS.index(r["op"]), order[r["system"]]))
    print(f"  {time.perf_counter() - t0:.1f} s: " + ", ".join(
        f"{r['system']} {r['op']} {r['status']}" for r in rows[start:]), file=sys.stderr, flush=True)


def workload_config(wl, args):
    cfg = wl.config(args.quick)
    return {**cfg, **{k: v for k, v in GPU_SIZES.get(wl.NAME, {}).items() if k in cfg}} if args.gpu else cfg


def runs(system, wl):
    """Whether `system` has an implementation of workload `wl`."""
    if system == "quadrants-cuda":
        return "quadrants" in wl.SYSTEMS and wl is not compile_latency
    return system in wl.SYSTEMS or frameworks.supports(system, wl.NAME)


def prepare(wl, system, cfg, ref):
    if frameworks.supports(system, wl.NAME):
        return frameworks.prepare(system, wl.NAME, cfg, ref)
    if system == "quadrants-cuda":     # the Taichi-like code of the workload, on Quadrants' CUDA backend
        with common.peer_arch("quadrants", "cuda"):
            return wl.prepare_quadrants(cfg, ref)
    return getattr(wl, f"prepare_{system}")(cfg, ref)


def availability(systems, args):
    """{system: why it cannot run} for the systems that cannot."""
    unavailable = {}
    for system in systems:
        if system in PEERS or system == "quadrants-cuda":
            why = ensure_installed(system.split("-")[0], not args.no_install)
            unavailable[system] = why or probe(system)
        elif system in frameworks.SYSTEMS:
            unavailable[system] = frameworks.unavailable(system)
        elif system == "spvad":
            unavailable[system] = probe(system)
        elif system == "limit":   # hand-written shaders on spvad's device: the shader tools and spvad must work
            unavailable[system] = limit.missing_tools() or (
                unavailable["spvad"] if "spvad" in unavailable else probe("spvad"))
    return {s: why for s, why in unavailable.items() if why}


# ---- reporting -------------------------------------------------------------------------------------------
def fmt_value(row):
    if row is None:
        return ""
    if row["status"] != "OK":
        return row["status"]
    v, unit = row["value"], row["unit"]
    if unit == "ms" and v >= 1000:
        return f"{v / 1e3:.3g} s"
    if unit == "ms" and v < 1:
        return f"{v * 1e3:.3g} us"
    return f"{v:.3g} {unit}"


def ratio(a, b):
    if a is None or b is None or a["status"] != "OK" or b["status"] != "OK" or not b["value"]:
        return "-"
    return f"{a['value'] / b['value']:.2f}"


def cells(rows, systems):
    """The table's header and rows of cells: workload, op, spvad's value, then each peer's value and ratio."""
    present = {r["system"] for r in rows}
    systems = [s for s in systems if s in present]
    peers = [s for s in systems if s != "spvad"]
    have_spvad = "spvad" in systems
    header = ["workload", "op"] + (["spvad"] if have_spvad else [])
    for p in peers:
        header += [p] + ([f"spvad/{p}"] if have_spvad else [])
    seen = []
    for r in rows:
        key = (r["workload"], r["op"])
        if key not in seen:
            seen.append(key)
    by = {(r["workload"], r["op"], r["system"]): r for r in rows}
    body = []
    for wl, op in seen:
        line = [wl, op]
        sv = by.get((wl, op, "spvad"))
        if have_spvad:
            line.append(fmt_value(sv))
        for p in peers:
            pv = by.get((wl, op, p))
            line.append(fmt_value(pv))
            if have_spvad:
                line.append(ratio(sv, pv) if pv is not None else "")
        body.append(line)
    return header, body


def table(rows, systems, titles):
    header, body = cells(rows, systems)
    lines = []
    widths = [max(len(str(c[i])) for c in [header] + body) for i in range(len(header))]
    fmt = lambda line: "  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w)  # noqa: E731
                                 for i, (c, w) in enumerate(zip(line, widths)))
    lines.append(fmt(header))
    lines.append("  ".join("-" * w for w in widths))
    last = None
    for line in body:
        if last is not None and line[0] != last:
            lines.append("")
        lines.append(fmt([line[0] if line[0] != last else "", *line[1:]]))
        last = line[0]
    groups = {}                 # one note per (system, status, reason), listing the operations it covers
    for r in rows:
        if r["status"] != "OK":
            groups.setdefault((r["system"], r["status"], r["detail"]), []).append(f"{r['workload']}/{r['op']}")
    notes = [f"  {system} {status} ({', '.join(ops)}): {detail}" for (system, status, detail), ops in groups.items()]
    lines += bandwidth_notes(rows)
    out = ["", "Workloads:"] + [f"  {name}: {t}" for name, t in titles.items()] + [""] + lines
    if notes:
        out += ["", "Not timed:"] + notes
    return "\n".join(out)


def bandwidth_notes(rows):
    """Elementwise forward as a share of the same system's device-to-device copy (both read and write 4n
    bytes): how close a memory-bound kernel comes to the memory's bandwidth."""
    by = {(r["op"], r["system"]): r for r in rows if r["workload"] == "elementwise" and r["status"] == "OK"}
    shares = [f"{system} {by[('d2d copy', system)]['value'] / r['value']:.0%}"
              for (op, system), r in by.items() if op == "forward" and ("d2d copy", system) in by]
    return ["", "elementwise forward, % of the same system's d2d copy bandwidth: " + ", ".join(shares)] if shares else []


def markdown(meta, rows, systems, titles):
    """The table as markdown, headed by the device, driver, CPU and date (README's GPU table)."""
    header, body = cells(rows, systems)
    dev = meta["device"]
    out = [f"Device: {dev.get('name', dev.get('error'))}, driver {dev.get('driver')}; CPU: {meta['cpu']}; "
           f"{time.strftime('%Y-%m-%d')}; `{meta['command']}`", "",
           "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in line) + " |" for line in body]
    out += ["", "Workloads:"] + [f"- {name}: {t}" for name, t in titles.items()]
    notes = {(r["system"], r["status"], r["detail"]) for r in rows if r["status"] != "OK"}
    out += [""] + [f"- {system} {status}: {detail}" for system, status, detail in sorted(notes)] if notes else []
    return "\n".join(out) + "\n"


def metadata(args, systems, unavailable):
    info = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv), "quick": args.quick,
            "repeat": args.repeat, "warmup": 1, "sample_s": common.SAMPLE_S, "python": platform.python_version(), "machine": platform.node(),
            "versions": {d: installed_version(d) for d in ("spvad", "taichi", "quadrants", "numpy", "jax", "torch",
                                                               "cupy-cuda12x")},
            "systems": list(systems), "unavailable": unavailable, "cpu": cpu_model()}
    try:
        import spvad as sp
        common.init_spvad()
        dev = sp.device_info()
        info["device"] = {"name": dev.get("name"), "driver": dev.get("driver"), "type": dev.get("device_type")}
    except Exception as e:  # noqa: BLE001
        info["device"] = {"error": str(e)}
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, 3 repetitions: a smoke run")
    ap.add_argument("--gpu", action="store_true", help="sizes that fill a large GPU (GPU_SIZES)")
    ap.add_argument("--markdown", default="", help="also write the table as markdown to this file")
    ap.add_argument("--only", default="", help="comma-separated workloads: " +
                    ",".join(w.NAME for w in WORKLOADS))
    ap.add_argument("--systems", default=",".join(ALL_SYSTEMS))
    ap.add_argument("--repeat", type=int, default=0, help="timed repetitions (default 7, --quick 3)")
    ap.add_argument("--json", default="", help="output file (default benchmarks/results/peers[-quick].json)")
    ap.add_argument("--no-install", action="store_true", help="never pip-install a missing peer")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    ap.add_argument("--compile-child", help=argparse.SUPPRESS)
    ap.add_argument("--cache", default="off", help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:
        return probe_child(args.probe)
    if args.compile_child:
        return compile_latency.child(args.compile_child, args.cache, args.cache_dir)
    t_start = time.perf_counter()
    args.repeat = args.repeat or (3 if args.quick else 7)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = [s for s in systems if s not in ALL_SYSTEMS]
    if bad:
        ap.error(f"unknown system(s) {bad}; choose from {','.join(ALL_SYSTEMS)}")
    # Always in ALL_SYSTEMS' order: spvad is prepared before the limit, which borrows spvad's runtime (preparing
    # spvad re-initialises it), and the table puts the limit beside spvad.
    systems = [s for s in ALL_SYSTEMS if s in systems]
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in {w.NAME for w in WORKLOADS}]
    if unknown:
        ap.error(f"unknown workload(s) {unknown}; choose from {','.join(w.NAME for w in WORKLOADS)}")
    workloads = [w for w in WORKLOADS if not names or w.NAME in names]

    unavailable = availability(systems, args)
    for s, why in unavailable.items():
        print(f"{s}: UNAVAILABLE: {why}", file=sys.stderr, flush=True)

    meta = metadata(args, systems, unavailable)
    path = args.json or os.path.join(RESULTS, "peers-quick.json" if args.quick else "peers.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    rows, titles = [], {}
    together = [s for s in systems if s != "quadrants-cuda" or "quadrants" not in systems]
    for wl in workloads:
        titles[wl.NAME] = wl.title(workload_config(wl, args))
        run_workload(wl, together, unavailable, args, rows)
        if len(together) < len(systems):    # Quadrants on CUDA after Quadrants on Vulkan: one runtime at a time
            run_workload(wl, ["quadrants-cuda"], unavailable, args, rows)
        meta["total_s"] = round(time.perf_counter() - t_start, 1)
        with open(path, "w") as f:          # written after every workload: a crash keeps what was measured
            json.dump({"meta": meta, "workloads": titles, "results": rows}, f, indent=1)
    dev = meta["device"].get("name", meta["device"].get("error"))
    print(f"device: {dev} (Vulkan); CPU: {meta['cpu']}; versions: " +
          ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v) +
          f"; median of {args.repeat} samples after 1 warm-up (a sample of an operation under "
          f"{common.SAMPLE_S * 1e3:.0f} ms: the mean of enough runs to last that long); ratio = spvad time / other time (< 1: spvad faster; "
          "spvad/limit: how far spvad is from hand-written GLSL on the same RHI, 1 = as fast)")
    print(table(rows, systems, titles))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(meta, rows, systems, titles))
    print(f"\nresults: {os.path.relpath(path)}; total {meta['total_s']} s")


if __name__ == "__main__":
    main()
