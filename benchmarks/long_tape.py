"""A long Tape: DiffTaichi's electric over 2,048 steps (4 kernels per step, 8,188 launches;
benchmarks/workloads/electric_long.py) on spvad, Taichi and Quadrants, on the same Vulkan device: the forward,
the Tape's forward + backward, the cost of recording a launch by its position in the Tape (wall and host CPU
time per launch, by eighths of the Tape), and the bytes the Tape keeps per launch. Every system's loss and
gradients are checked against float64 first (WRONG instead of a time); the table names the device and CPU.

Usage: python benchmarks/long_tape.py [--steps N] [--quick] [--systems spvad,taichi,quadrants] [--repeat R]
                                      [--out DIR] [--max-seconds S] [--no-install]
The peers are installed as benchmarks/peers.py installs them (and reported UNAVAILABLE when they cannot run).

       python benchmarks/long_tape.py --budgets [--steps N] [--spring-steps M] [--repeat R] [--out DIR]
spvad's Tape with checkpoint_budget at 1/10 and 1/100 of the bytes the unbounded Tape keeps (it keeps
snapshots and recomputes the forward between them in the backward: spvad/tape/recompute.py), for DiffTaichi's
electric (N steps, default 2048) and a double-buffered mass-spring (M steps, default 10,000; 3 kernels a step):
the Tape's time against the unbounded Tape's, the bytes kept and the launches recomputed. Each budgeted Tape's
gradients are compared with the unbounded Tape's, and the loss and two spring gradients with float64.
Electric's budgeted rows raise, as they must: its unbounded Tape keeps only x[t] and v[t] as the previous
rollout left them (nn1(t) reads them before advance(t) overwrites them), which no replay can compute again.
electric-prev (nn1(t) reads step t - 1's state: every element is written once) keeps nothing, bounded or not:
its budgets of 1/10 and 1/100 of nothing hold it, with nothing recomputed.
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")   # lavapipe warns without one
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import peers  # noqa: E402
import spvad as sp  # noqa: E402
from workloads import common, electric_long as wl, mass_spring as ms  # noqa: E402

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
    if "--budgets" in sys.argv:
        return budgets_main()
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


# ---- --budgets: sp.Tape(checkpoint_budget=...) past the budget, against the unbounded Tape -----------------
FRACTIONS = (None, 10, 100)   # None: the unbounded Tape


def budgets_main():
    ap = argparse.ArgumentParser(description="spvad's Tape with checkpoint_budget (see the module docstring)")
    ap.add_argument("--budgets", action="store_true")
    ap.add_argument("--steps", type=int, default=2048, help="electric's steps")
    ap.add_argument("--spring-steps", type=int, default=10000, help="the mass-spring's steps")
    ap.add_argument("--grid", type=int, default=8, help="the mass-spring's grid (G x G particles)")
    ap.add_argument("--repeat", type=int, default=1, help="timed Tapes per row (after a warm-up)")
    ap.add_argument("--only", default="electric,electric-prev,mass-spring", help="workloads to run")
    ap.add_argument("--out", default=peers.RESULTS)
    args = ap.parse_args()
    common.init_spvad()
    meta = {"cpu": peers.cpu_model(), "device": sp.device_info().get("name"), "repeat": args.repeat,
            "steps": args.steps, "spring_steps": args.spring_steps, "grid": args.grid}
    rows, only = [], args.only.split(",")
    for name, make in (("electric", lambda: electric_tapes(args.steps, "difftaichi")),
                       ("electric-prev", lambda: electric_tapes(args.steps, "prev")),
                       ("mass-spring", lambda: spring_tapes(args.spring_steps, args.grid))):
        if name in only:
            rows += budget_rows(name, *make(), args.repeat)
    path = os.path.join(args.out, "long_tape-budgets.json")
    os.makedirs(args.out, exist_ok=True)
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=1)
    print(f"device: {meta['device']} (Vulkan); CPU: {meta['cpu']}; median of {args.repeat} after a warm-up; "
          f"electric {args.steps} steps, mass-spring {args.spring_steps} steps on {args.grid}x{args.grid}")
    head = ("workload", "budget", "Tape fwd+bwd", "vs unbounded", "bytes kept", "of budget", "recomputed", "check")
    print_table(head, [(r["workload"], r["budget"], f"{r['tape_s']:.3g} s" if "tape_s" in r else "",
                        f"{r['ratio']:.2f}x" if "ratio" in r else "",
                        f"{r['kept_bytes']:,}" if "kept_bytes" in r else "",
                        f"{r['budget_bytes']:,}" if r.get("budget_bytes") is not None else "",
                        f"{r['recomputed']:,}" if "recomputed" in r else "", r["status"]) for r in rows])
    print("\n" + "\n".join(f"  {r['workload']} {r['budget']}: {r['detail']}" for r in rows))
    print(f"\nresults: {os.path.relpath(path)}")


def budget_rows(name, launches, run, check, repeat):
    """Rows of one workload: the unbounded Tape, then budgets of 1/10 and 1/100 of what it kept. `run(budget)`
    runs a Tape and returns it and the gradients; `check(grads)` compares them with float64."""
    rows, base = [], None
    for fraction in FRACTIONS:
        row = {"workload": name, "budget": "unbounded" if fraction is None else f"1/{fraction}",
               "launches": launches, "budget_bytes": None if fraction is None else base["kept_bytes"] // fraction}
        rows.append(row)
        try:
            _, warm = run(row["budget_bytes"])   # the warm-up compiles
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                tape, grads = run(row["budget_bytes"])
                times.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - a budget too small is a result, not a crash
            row.update(status="ERROR", detail=common.describe(e))
            continue
        ok, detail = check(grads)
        if base is None:   # float atomic adds in another order: how much two unbounded Tapes differ
            row["noise"] = _difference(warm, grads)
            detail += f"; two unbounded Tapes differ by {row['noise']:.2g} (relative)"
        else:
            row["difference"] = _difference(grads, base["grads"])
            same = row["difference"] == 0
            ok = ok and row["difference"] <= max(10 * base["noise"], 1e-5)
            detail += "; gradients " + ("bitwise equal to the unbounded Tape's" if same else
                                        f"differ from the unbounded Tape's by {row['difference']:.2g} (relative)")
        row.update(status="OK" if ok else "WRONG", detail=detail, tape_s=statistics.median(times),
                   kept_bytes=tape.checkpoint_bytes, recomputed=tape.recomputed_launches)
        if base is None:
            base = dict(row, grads=grads)
        else:
            row["ratio"] = row["tape_s"] / base["tape_s"]
    return rows


def _difference(grads, base):
    """The largest difference between two lists of gradients, relative to the largest gradient of each."""
    return max(float(np.abs(g - b).max() / max(np.abs(b).max(), 1e-30)) for g, b in zip(grads, base))


def electric_tapes(steps, form):
    """DiffTaichi's electric as examples/electric.py writes it ("difftaichi": nn1(t) reads x[t] and v[t] before
    advance(t) overwrites them, and the unbounded Tape keeps those rows) or reading the state step t - 1 left
    ("prev": every element written once, so that the Tape keeps nothing); workloads/electric_long.py."""
    ref = wl.reference(steps, form)
    prog = wl.prepare_spvad(ref)

    def run(budget):
        prog.reset()
        tape = prog.tape(budget=budget)
        sp.sync()
        return tape, prog.grads()

    return wl.launches(steps), run, lambda grads: wl.check(prog.loss(), grads, ref)


# the mass-spring of workloads/mass_spring.py (its cloth, constants and float64 simulate), double-buffered: the
# state is two (n, 2) arrays of positions and two of velocities, and a force array cleared every step
@sp.kernel
def clear_forces(f: sp.Array):
    for i in range(f.shape[0]):
        f[i, 0] = 0.0
        f[i, 1] = 0.0


@sp.kernel
def spring_forces(x: sp.Array, f: sp.Array, a: sp.Array, b: sp.Array, k: sp.Array, rest: sp.Array):
    for s in range(a.shape[0]):
        i = a[s]
        j = b[s]
        dx = x[j, 0] - x[i, 0]
        dy = x[j, 1] - x[i, 1]
        length = sp.sqrt(dx * dx + dy * dy)
        c = k[s] * (length - rest[s]) / length
        f[i, 0] += c * dx
        f[i, 1] += c * dy
        f[j, 0] += -c * dx
        f[j, 1] += -c * dy


@sp.kernel
def advance(x: sp.Array, v: sp.Array, f: sp.Array, free: sp.Array, x_new: sp.Array, v_new: sp.Array):
    for i in range(x.shape[0]):
        vx = free[i] * (v[i, 0] * ms.DAMPING + ms.DT * f[i, 0])
        vy = free[i] * (v[i, 1] * ms.DAMPING + ms.DT * (f[i, 1] + ms.GRAVITY))
        v_new[i, 0] = vx
        v_new[i, 1] = vy
        x_new[i, 0] = x[i, 0] + ms.DT * vx
        x_new[i, 1] = x[i, 1] + ms.DT * vy


@sp.kernel
def spring_loss(x: sp.Array, target: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        dx = x[i, 0] - target[i, 0]
        dy = x[i, 1] - target[i, 1]
        loss[None] += (dx * dx + dy * dy) / x.shape[0]


def spring_tapes(steps, grid):
    """The double-buffered mass-spring: its Tape keeps the positions of every step (the force kernel's gradient
    reads them, and the step after next overwrites them)."""
    ref = ms.reference({"grid": grid, "steps": 1})   # (the cloth; the checks below run `steps` steps)
    n = grid * grid
    x = [sp.from_numpy(ref["p0"], needs_grad=True), sp.ndarray(sp.f32, (n, 2), needs_grad=True)]
    v = [sp.ndarray(sp.f32, (n, 2), needs_grad=True), sp.ndarray(sp.f32, (n, 2), needs_grad=True)]
    f = sp.ndarray(sp.f32, (n, 2), needs_grad=True)
    a, b, rest, free, target = (sp.from_numpy(ref[key]) for key in ("a", "b", "rest", "free", "target"))
    k, loss = sp.from_numpy(ref["k"], needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)

    def run(budget):
        x[0].from_numpy(ref["p0"])
        v[0].fill(0.0)
        with sp.Tape(loss, checkpoint_budget=budget) as tape:
            for s in range(steps):
                clear_forces(f)
                spring_forces(x[s % 2], f, a, b, k, rest)
                advance(x[s % 2], v[s % 2], f, free, x[1 - s % 2], v[1 - s % 2])
            spring_loss(x[steps % 2], target, loss)
        sp.sync()
        return tape, [k.grad.to_numpy(), x[0].grad.to_numpy()]

    f64 = dict(k=ref["k"].astype(np.float64), a=ref["a"], b=ref["b"], rest=ref["rest"].astype(np.float64),
               free=ref["free"].astype(np.float64), target=ref["target"].astype(np.float64), steps=steps)
    p0 = ref["p0"].astype(np.float64)
    want = ms.simulate(p0, **f64)[0]
    springs, slopes = ref["springs"][:2], []
    for s in springs:   # central differences of two stiffnesses, in float64
        h, kp, km = 1e-4 * f64["k"][s], f64["k"].copy(), f64["k"].copy()
        kp[s] += h
        km[s] -= h
        slopes.append((ms.simulate(p0, **{**f64, "k": kp})[0] - ms.simulate(p0, **{**f64, "k": km})[0]) / (2 * h))

    def check(grads):
        return common.all_close([
            ("loss", common.close_to([float(loss[None])], [want], rtol=1e-3)),
            ("k.grad", common.close_to(grads[0][springs], slopes, rtol=1e-2, atol=1e-2 * np.abs(slopes).max()))])

    return 3 * steps + 1, run, check


if __name__ == "__main__":
    main()
