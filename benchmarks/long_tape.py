"""A long Tape: DiffTaichi's electric over 2,048 steps (4 kernels per step, 8,188 launches;
benchmarks/workloads/electric_long.py) on spvad, Taichi and Quadrants, on the same Vulkan device: the forward,
the Tape's forward + backward, the cost of recording a launch by its position in the Tape (wall and host CPU
time per launch, by eighths of the Tape), and the bytes the Tape keeps per launch. Every system's loss and
gradients are checked against float64 first (WRONG instead of a time); the table names the device and CPU.

Usage: python benchmarks/long_tape.py [--steps N] [--quick] [--systems spvad,taichi,quadrants] [--repeat R]
                                      [--out DIR] [--max-seconds S] [--no-install]
The peers are installed as benchmarks/peers.py installs them (and reported UNAVAILABLE when they cannot run).
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")   # lavapipe warns without one
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peers  # noqa: E402
from workloads import common, electric_long as wl  # noqa: E402

SYSTEMS = ("spvad", "taichi", "quadrants")
FORMS = {"prev": SYSTEMS, "difftaichi": ("spvad",)}   # which systems run each form (electric_long.py says why)
PARTS = 8


def measure(prog, steps):
    """One forward and one Tape forward + backward of a prepared program: seconds, and per part of the Tape
    the (wall, this thread's CPU) seconds spent recording it."""
    prog.reset()
    prog.sync()
    t0 = time.perf_counter()
    prog.forward()
    prog.sync()
    forward = time.perf_counter() - t0
    prog.reset()
    prog.sync()
    bounds = {1 + (steps - 1) * k // PARTS for k in range(PARTS)} | {steps}
    marks = []

    def mark(t):
        if t in bounds:
            marks.append((time.perf_counter(), time.thread_time()))
    t0 = time.perf_counter()
    prog.tape(mark)
    prog.sync()
    total = time.perf_counter() - t0
    parts = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(marks, marks[1:])]
    return {"forward_s": forward, "tape_s": total, "record_s": marks[-1][0] - t0,
            "backward_s": t0 + total - marks[-1][0], "parts_s": parts}


def run_form(form, systems, unavailable, args, deadline):
    """Rows of one form: prepare and check every system, then interleaved repetitions until `repeat` or the
    deadline (one at least)."""
    steps = args.steps
    t0 = time.perf_counter()
    ref = wl.reference(steps, form)
    print(f"[{form}] float64 reference: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    rows, live = {}, []
    for system in systems:
        row = rows[system] = {"form": form, "system": system, "steps": steps, "launches": wl.launches(steps)}
        if system in unavailable:
            row.update(status="UNAVAILABLE", detail=unavailable[system])
            continue
        try:
            prog = getattr(wl, f"prepare_{system}")(ref)
            first = measure(prog, steps)   # the warm-up compiles; its results are checked
            ok, detail = wl.check(prog.loss(), prog.grads(), ref)
        except common.Unavailable as e:
            row.update(status="UNAVAILABLE", detail=str(e))
            continue
        except Exception as e:  # noqa: BLE001 - a failing system is a result, not a crash
            row.update(status="ERROR", detail=common.describe(e))
            continue
        row.update(status="OK" if ok else "WRONG", detail=detail, kept_bytes=prog.kept(), warmup=first, samples=[])
        if ok:
            live.append((system, prog))
    for r in range(args.repeat if live else 0):
        if r and time.perf_counter() > deadline:
            print(f"[{form}] time bound reached after {r} repetitions", file=sys.stderr, flush=True)
            break
        for system, prog in live[r % len(live):] + live[:r % len(live)]:   # a rotating order
            rows[system]["samples"].append(measure(prog, steps))
    for system, _ in live:
        summarise(rows[system])
    for system in systems:
        if system != "spvad" and system not in unavailable:
            common.release_peer(system)
    return list(rows.values())


def summarise(row):
    """Medians over the repetitions; per launch figures."""
    samples, n = row["samples"], row["launches"]
    for key in ("forward_s", "tape_s", "record_s", "backward_s"):
        row[key] = statistics.median(s[key] for s in samples)
    row["record_wall_us"] = [1e6 * statistics.median(s["parts_s"][k][0] for s in samples) / (n / PARTS)
                             for k in range(PARTS)]
    row["record_cpu_us"] = [1e6 * statistics.median(s["parts_s"][k][1] for s in samples) / (n / PARTS)
                            for k in range(PARTS)]
    if row["kept_bytes"] is not None:
        row["kept_bytes_per_launch"] = row["kept_bytes"] / n


def fmt_s(seconds, launches):
    return f"{seconds:.3g} s ({1e6 * seconds / launches:.0f} us/launch)"


def report(rows, meta):
    print(f"device: {meta['device']} (Vulkan); CPU: {meta['cpu']}; versions: " +
          ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v) +
          f"; median of up to {meta['repeat']} after a warm-up; {meta['steps']} steps x "
          f"{wl.KERNELS_PER_STEP} kernels")
    head = ("form", "system", "forward", "Tape fwd+bwd", "recording", "backward", "kept by the Tape")
    body = []
    for r in rows:
        if r["status"] != "OK":
            body.append((r["form"], r["system"], r["status"], "", "", "", ""))
            continue
        n = r["launches"]
        kept = "nothing: replays" if r["kept_bytes"] is None else \
            f"{r['kept_bytes']:,} B ({r['kept_bytes_per_launch']:.3g} B/launch)"
        body.append((r["form"], r["system"], fmt_s(r["forward_s"], n), fmt_s(r["tape_s"], n),
                     fmt_s(r["record_s"], n), fmt_s(r["backward_s"], n), kept))
    print_table(head, body)
    print(f"\nrecording, us per launch by position in the Tape (eighths of it): wall / this thread's CPU")
    head = ("form", "system") + tuple(f"{k + 1}/{PARTS}" for k in range(PARTS))
    print_table(head, [(r["form"], r["system"]) + tuple(f"{w:.0f}/{c:.0f}" for w, c in zip(
        r["record_wall_us"], r["record_cpu_us"])) for r in rows if r["status"] == "OK"])
    notes = [f"  {r['form']} {r['system']} {r['status']}: {r['detail']}" for r in rows if r["status"] != "OK"]
    if notes:
        print("\nNot timed:\n" + "\n".join(notes))


def print_table(head, body):
    widths = [max(len(str(c[i])) for c in (head, *body)) for i in range(len(head))]
    for cells in (head, ["-" * w for w in widths], *body):
        print("  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=0, help="time steps (default 2048, --quick 256)")
    ap.add_argument("--quick", action="store_true", help="256 steps, 2 repetitions: a smoke run")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--repeat", type=int, default=0, help="timed repetitions (default 3, --quick 2)")
    ap.add_argument("--out", default=peers.RESULTS, help="folder of the JSON file (long_tape[-quick].json)")
    ap.add_argument("--max-seconds", type=float, default=1200, help="no new repetition starts after this")
    ap.add_argument("--no-install", action="store_true", help="never pip-install a missing peer")
    args = ap.parse_args()
    start = time.perf_counter()
    args.steps = args.steps or (256 if args.quick else 2048)
    args.repeat = args.repeat or (2 if args.quick else 3)
    systems = [s for s in SYSTEMS if s in {x.strip() for x in args.systems.split(",")}]
    unavailable = {}
    for system in systems:
        why = peers.ensure_installed(system, not args.no_install) if system in peers.PEERS else None
        unavailable[system] = why or peers.probe(system)
    unavailable = {s: why for s, why in unavailable.items() if why}
    for s, why in unavailable.items():
        print(f"{s}: UNAVAILABLE: {why}", file=sys.stderr, flush=True)
    meta = peers.metadata(argparse.Namespace(quick=args.quick, repeat=args.repeat), systems, unavailable)
    meta.update(steps=args.steps, parts=PARTS, device=meta["device"].get("name", meta["device"].get("error")))
    path = os.path.join(args.out, "long_tape-quick.json" if args.quick else "long_tape.json")
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for form, allowed in FORMS.items():
        rows += run_form(form, [s for s in systems if s in allowed], unavailable, args,
                         start + args.max_seconds)
        meta["total_s"] = round(time.perf_counter() - start, 1)
        with open(path, "w") as f:   # after every form: a crash keeps what was measured
            json.dump({"meta": meta, "results": rows}, f, indent=1)
    report(rows, meta)
    print(f"\nresults: {os.path.relpath(path)}; total {meta['total_s']} s")


if __name__ == "__main__":
    main()
