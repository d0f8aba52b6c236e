"""What each optimiser pass buys: benchmarks/peers.py (spvad and the hand-written limit) run with the passes of
spvad/pipeline.py PASSES left out one at a time (SPVAD_SKIP_PASSES), and all of them, rounds interleaved in
one session; prints the median spvad/limit ratio per workload and op for each variant.

Usage: python benchmarks/passes.py [--rounds R] [--only integrator,elementwise,mass_spring,compile] [--quick]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from spvad.pipeline import PASSES  # noqa: E402


def variants():
    """(label, SPVAD_SKIP_PASSES) rows: everything on, each pass off, everything off."""
    names = list(PASSES)
    return [("all passes", "")] + [(f"without {n}", n) for n in names] + [("no optimiser", ",".join(names))]


def run(skip, only, quick):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = [sys.executable, os.path.join(HERE, "peers.py"), "--systems", "spvad,limit", "--no-install",
           "--only", only, "--json", path] + (["--quick"] if quick else [])
    subprocess.run(cmd, env=dict(os.environ, SPVAD_SKIP_PASSES=skip), check=True, capture_output=True)
    with open(path) as f:
        data = json.load(f)
    os.unlink(path)
    values = {(r["workload"], r["op"], r["system"]): r.get("value") for r in data["results"]
              if r.get("status") == "OK"}
    return data["meta"]["cpu"], values


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default="integrator,elementwise,mass_spring,compile")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    rows = variants()
    got = {label: [] for label, _ in rows}
    cpu = None
    for _ in range(a.rounds):
        for label, skip in rows:
            cpu, values = run(skip, a.only, a.quick)
            got[label].append(values)
    keys = sorted({(w, op) for v in got["all passes"] for (w, op, s) in v if s == "spvad"},
                  key=lambda k: (a.only.split(",").index(k[0]) if k[0] in a.only.split(",") else 99, k[1]))
    print(f"CPU: {cpu}; {a.rounds} interleaved rounds; spvad time (ms), and / limit where there is one")
    print(f"{'variant':<22}" + "".join(f"{w[:11] + ' ' + op[:13]:>28}" for w, op in keys))
    for label, _ in rows:
        cells = []
        for w, op in keys:
            t = statistics.median(v[(w, op, "spvad")] for v in got[label] if (w, op, "spvad") in v)
            lim = [v[(w, op, "limit")] for v in got[label] if (w, op, "limit") in v]
            cells.append(f"{t:.3g}" + (f" ({t / statistics.median(lim):.2f}x)" if lim else ""))
        print(f"{label:<22}" + "".join(f"{c:>28}" for c in cells))


if __name__ == "__main__":
    main()
