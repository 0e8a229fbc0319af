"""Benchmark: merging rule objects (GPUPolicy, ...) with the rule files, next to compiling
the same documents as rule files, in the same run.

    .venv/bin/python bench/ruleobjects.py [--objects 100] [--rounds 5]

Every worker does this on each change of an object (and the status writer once more), so
an object must cost what the same document costs in a file. Three sets, each with the
shipped rules/ and ``--objects`` GPUPolicy objects (one team namespace each):
- all valid: the one-compile path;
- one misspelt check among them: it fails its own checks and is left out, the others
  still go in one compile;
- one that conflicts with another: found by compiling each against those before it.

Baseline: rules/ plus the valid set written as one more rule file. Targets (median of
``--rounds``, each measure the best of three): all valid and one misspelt <= 1.5x; one
conflicting <= --objects x (one compile per object: rare, since /validate refuses such an
object at apply).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webhook.files.rulefiles import compile_rules, read_rule_files  # noqa: E402
from webhook.files.ruleobjects import RuleObject  # noqa: E402


def policy(index: int, spec: dict[str, Any]) -> RuleObject:
    return RuleObject.of(
        {
            "apiVersion": "gpu-webhook.io/v1alpha1",
            "kind": "GPUPolicy",
            "metadata": {"name": f"team-{index}", "generation": 1},
            "spec": spec,
        }
    )


def sets(count: int) -> dict[str, list[RuleObject]]:
    valid = [
        policy(i, {"match": {"namespaces": [f"team-{i}"]}, "validate": [{"maxGPUsPerPod": 4}]})
        for i in range(count)
    ]
    runtime = {"match": {"namespaces": ["team-0"]}, "mutate": {"runtimeClassName": "nvidia"}}
    return {
        "all valid": valid,
        "one misspelt": [*valid[:-1], policy(count - 1, {"validate": [{"maxGPUsPerPd": 4}]})],
        "one conflicting": [
            *valid[:-2],
            policy(count - 2, runtime),
            policy(count - 1, {**runtime, "mutate": {"runtimeClassName": "other"}}),
        ],
    }


def seconds(files: Any, objects: list[RuleObject]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        merged = compile_rules(files, directory="rules", objects=objects)
        best = min(best, time.perf_counter() - started)
        assert len(merged.verdicts) == len(objects)
    return best


def as_files(objects: list[RuleObject], directory: Path) -> Any:
    for path in (ROOT / "rules").glob("*.yaml"):
        (directory / path.name).write_bytes(path.read_bytes())
    (directory / "50-teams.yaml").write_text(yaml.safe_dump_all([o.body for o in objects]))
    return read_rule_files(str(directory))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    files = read_rule_files(str(ROOT / "rules"))
    targets = {"all valid": 1.5, "one misspelt": 1.5, "one conflicting": float(args.objects)}
    ratios: dict[str, list[float]] = {name: [] for name in targets}
    built = sets(args.objects)
    with tempfile.TemporaryDirectory() as scratch:
        same_as_files = as_files(built["all valid"], Path(scratch))
        for _ in range(args.rounds):
            base = seconds(same_as_files, [])
            for name, objects in built.items():
                ratios[name].append(seconds(files, objects) / base)
    failed = False
    for name, values in ratios.items():
        median = statistics.median(values)
        ok = median <= targets[name]
        failed |= not ok
        print(
            f"{name}: {median:.1f}x the same documents as files (target <= {targets[name]:g}x) {'ok' if ok else 'MISSED'}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
