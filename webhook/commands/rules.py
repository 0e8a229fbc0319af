"""``gpu-webhook rules lint DIR`` and ``gpu-webhook rules schema``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from webhook.engine.policy import PolicyError
from webhook.engine.schema import rules_schema
from webhook.files.rulefiles import load_policy


def register(sub: Any) -> None:
    parser = sub.add_parser("rules", help="work with rule files")
    rules = parser.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    lint = rules.add_parser(
        "lint",
        help="report every problem in a rule directory",
        description="Validate every rule file in DIR against the schema and the semantic "
        "checks (conflicting rules, bad quantities); report all problems; exit 1 if any.",
    )
    lint.add_argument("directory", metavar="DIR")
    lint.set_defaults(handler=_lint)
    schema = rules.add_parser("schema", help="print the JSON Schema of rule file documents")
    schema.set_defaults(handler=_schema)


def _lint(args: argparse.Namespace) -> int:
    try:
        policy = load_policy(args.directory)
    except PolicyError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        count = len(exc.problems)
        print(f"{count} problem{'s' if count != 1 else ''} found", file=sys.stderr)
        return 1
    print(
        f"{args.directory}: {len(policy.rules)} rules, {len(policy.node_pools)} node pools, "
        "no problems"
    )
    return 0


def _schema(args: argparse.Namespace) -> int:
    del args
    json.dump(rules_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
