"""Benchmark: how long ``gpu-webhook`` takes to answer, as ratios to the interpreter's own
start (``python -c pass``) measured in the same run.

    .venv/bin/python bench/startup.py [--runs 15]

Each round runs every case once, one after the other (the interpreter, ``--version``,
``check`` of one pod with the example inventory, ``rules lint rules``), so a neighbour that
loads this shared machine for a while slows every case of that round alike; the verdict is
the median of each case over the rounds, divided by the interpreter's median. The commands
run as a user runs them: the ``gpu-webhook`` script beside this interpreter, in a fresh
process, from the repository root, with their output discarded.

Targets: ``--version`` <= 8x (issue 36), ``check`` <= 10x and ``rules lint`` <= 10x (issue 43;
20x in issue 36).
Results: printed, and written to bench/results/startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "gpu-webhook"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "webhook"]

INVENTORY = ("--inventory", "examples/inventory.yaml")
# name -> (argv, target ratio to the interpreter's start; 0: the baseline itself)
CASES: dict[str, tuple[list[str], float]] = {
    "python -c pass": ([sys.executable, "-c", "pass"], 0.0),
    "--version": ([*COMMAND, "--version"], 8.0),
    "check": (
        [*COMMAND, "check", "examples/gpu-pod.yaml", *INVENTORY, "--rules", "rules"],
        10.0,
    ),
    "rules lint rules": ([*COMMAND, "rules", "lint", "rules"], 10.0),
}
BASELINE = "python -c pass"
# As on a user's machine, where pip compiled the package at install or Python caches the
# bytecode at the first run: an environment with PYTHONDONTWRITEBYTECODE (as CI images
# often set) would compile every module of the package at every start.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def seconds(argv: list[str]) -> float:
    """One run's wall time; a command that fails stops the benchmark, since its time would
    say nothing about answering."""
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr.decode()}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="rounds (default: 15)")
    args = parser.parse_args()
    for argv, _ in CASES.values():
        seconds(argv)  # warm the file cache and the bytecode: not what a user waits for
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.runs):
        for name, (argv, _) in CASES.items():
            times[name].append(seconds(argv))
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians[BASELINE]
    met = True
    results = {}
    for name, (_, target) in CASES.items():
        ratio = medians[name] / base
        results[name] = {"median_s": medians[name], "ratio": ratio, "target": target}
        if not target:
            print(f"{name:18} {medians[name] * 1000:7.1f} ms  (the baseline)")
            continue
        ok = ratio <= target
        met = met and ok
        print(
            f"{name:18} {medians[name] * 1000:7.1f} ms  {ratio:5.1f}x the interpreter "
            f"(target <= {target:.0f}x){'' if ok else '  MISSED'}"
        )
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "startup.json").write_text(
        json.dumps({"runs": args.runs, "times": times, "results": results}, indent=2) + "\n"
    )
    print(
        f"median of {args.runs} interleaved rounds; "
        + ("all targets met" if met else "TARGET MISSED")
    )
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
