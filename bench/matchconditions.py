#!/usr/bin/env python3
"""Non-GPU pod reviews the match conditions avoid (issue 43), as ratios of one run.

For the corpus's pods and pod templates that ask for no GPU, and for a synthetic set of
plain web pods (with the API server's default not-ready/unreachable tolerations), the share
the shipped rules' conditions skip, with and without ``--tainted-gpu-nodes``. Then the
"created" pods go through the admission service the way the API server sends them: only
those whose conditions hold are reviewed, so the service's review count grows by the calls
made, not by the pods. CEL is evaluated with celpy, as in the tests.

    .venv/bin/python bench/matchconditions.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import celpy
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import json  # noqa: E402

from webhook.admission.review import parse_review  # noqa: E402
from webhook.admission.service import AdmissionService  # noqa: E402
from webhook.engine.demand.gpuaccess import pod_asks_for_gpu  # noqa: E402
from webhook.engine.demand.gpus import pod_gpus  # noqa: E402
from webhook.engine.evaluation.matchconditions import MUTATING, match_conditions  # noqa: E402
from webhook.files.rulefiles import RuleStore, load_policy  # noqa: E402

DEFAULT_TOLERATIONS = [
    {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
]


def web_pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"web-{i}", "labels": {"app": "web"}},
        "spec": {
            "containers": [
                {
                    "name": "nginx",
                    "image": "nginx:1.27",
                    "ports": [{"containerPort": 80}],
                    "env": [{"name": "MODE", "value": "prod"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                }
            ],
            "volumes": [{"name": "cache", "emptyDir": {}}],
            "tolerations": DEFAULT_TOLERATIONS,
        },
    }


def corpus_pods(policy: Any) -> list[dict[str, Any]]:
    """Each corpus pod template asking for no GPU, as the Pod it makes."""
    found = []
    for path in sorted((ROOT / "tests/corpus").rglob("*.yaml")):
        if "_unparseable" in path.parts:
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            templates = policy.kinds.templates(doc) if isinstance(doc, dict) else None
            for t in templates or ():
                if not isinstance(t.spec, dict) or not t.spec.get("containers"):
                    continue
                pod = pod_gpus(t.spec, policy.settings.gpu_resources, t.singles)
                if pod_asks_for_gpu(pod) or t.spec.get("resourceClaims"):
                    continue
                spec = {
                    **t.spec,
                    "tolerations": [*(t.spec.get("tolerations") or []), *DEFAULT_TOLERATIONS],
                }
                found.append(
                    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
                )
    return found


def calls(program: Any, pod: dict[str, Any]) -> bool:
    request = {"kind": {"group": "", "version": "v1", "kind": "Pod"}, "subResource": "",
               "namespace": "default", "operation": "CREATE"}  # fmt: skip
    activation = {"object": celpy.json_to_cel(pod), "request": celpy.json_to_cel(request),
                  "oldObject": celpy.json_to_cel(None)}  # fmt: skip
    return bool(program.evaluate(activation))


def main() -> int:
    policy = load_policy(str(ROOT / "rules"))
    env = celpy.Environment()
    sets = {
        "corpus non-GPU pods": corpus_pods(policy),
        "plain web pods": [web_pod(i) for i in range(200)],
    }
    for tainted in (False, True):
        condition = match_conditions(policy, tainted_gpu_nodes=tainted)[MUTATING][0]
        program = env.program(env.compile(condition.expression))
        for name, pods in sets.items():
            skipped = sum(not calls(program, p) for p in pods)
            label = "tainted GPU nodes" if tainted else "no promise"
            print(f"{name:22} {label:18} skipped {skipped}/{len(pods)} = {skipped / len(pods):.2f}")
    # The service path: the API server calls /mutate only where the condition holds.
    condition = match_conditions(policy, tainted_gpu_nodes=True)[MUTATING][0]
    program = env.program(env.compile(condition.expression))
    service = AdmissionService(rules=RuleStore(str(ROOT / "rules")))
    reviewed = 0
    pods = sets["plain web pods"]
    for i, pod in enumerate(pods):
        if calls(program, pod):
            body = {"uid": str(i), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "operation": "CREATE", "namespace": "default", "object": pod}  # fmt: skip
            review = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": body,
            }
            service.review(parse_review(json.dumps(review)), mutate=True)
            reviewed += 1
    print(
        f"plain web pods created {len(pods)}, reviews {reviewed}: ratio {reviewed / len(pods):.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
