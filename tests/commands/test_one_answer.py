"""One answer from every command (issue 31): ``check``, ``explain -f``, ``audit -f``, a
``gpu-webhook test`` suite (issue 42) and the server, each given a golden case's object,
inventory and rules as its users give them (a file, ``--inventory``, ``--rules``; an
AdmissionReview to the admission service), agree with each other and with the case's
``expected.yaml``: allowed or denied, and the findings' rule, check and action in order.

A case where a command legitimately cannot give the same answer is listed in ``DIFFERS``
with the reason; every other case is held to all of them.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from collections import deque
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import ROOT, review
from tests.cluster.replayserver import Body, ReplayServer
from tests.engine.evaluation.test_cases import (
    SHARED_INVENTORIES,
    _read_yaml,
    _ref,
    case_dirs,
    rules_dir,
)
from tests.running import kubeconfig
from webhook.admission.inventory import StaticInventorySource
from webhook.admission.review import parse_review
from webhook.admission.service import AdmissionService
from webhook.cli import main
from webhook.cluster.sources.devicesource import PATHS
from webhook.cluster.sources.poolsource import CA_STATUS_PATH
from webhook.engine.kube.strict import strict_problems
from webhook.files.rulefiles import RuleStore, load_policy
from webhook.files.shipped import kube_schema

Verdict = tuple[bool, list[tuple[str, str, str]]]

# Why a command cannot be held to the server's answer on a case, by what the case asks.
NOT_A_CREATE = "an UPDATE or a subresource: check, explain and audit judge every object as a CREATE"
# Not a command's excuse but the case's: every command here, the server included, reads
# namespace labels from a cluster, and a static inventory has none.
NAMESPACE_LABELS = (
    "the namespace's labels come from the cluster (request.yaml namespaceLabels): with a "
    "static inventory no command sees them, so all four agree on an answer without them"
)
NO_NODES = "explain -f needs --inventory: the nodes to explain the pod against"
# Live audit reads a replayed API server: the case's inventory as the API server lists it.
NO_CLUSTER = (
    "no inventory: a cluster always has nodes, so a live audit has no equivalent of the "
    "file commands' run without --inventory"
)
NOT_REPLAYED = (
    "the inventory holds autoscaler custom resources or DeviceTaintRules, whose API "
    "discovery this replay does not script (the four other answers still agree)"
)
NOT_LISTED = "not of a kind the webhook understands, so a live audit lists none"
# The API server cannot decode the object (a count past int64): kubectl refuses it, so no
# webhook ever judges it in a cluster and no cluster holds it. The server's answer is kept as
# a golden case of the engine; the commands call it unusable, as kubectl does (asserted below).
UNDECODABLE = "the API server cannot decode the object: the commands say unusable, as kubectl"


def _request(case: Path) -> dict[str, Any]:
    path = case / "request.yaml"
    return (_read_yaml(path) or {}) if path.is_file() else {}


def differs(case: Path) -> dict[str, str]:
    """The commands that cannot give the server's answer on ``case``, with the reason."""
    request = _request(case)
    if request.get("operation", "CREATE") != "CREATE" or request.get("subResource"):
        return dict.fromkeys(("check", "explain", "audit", "test"), NOT_A_CREATE)
    if _undecodable(case):
        return dict.fromkeys(("check", "explain", "audit", "test", "live audit"), UNDECODABLE)
    if _inventory(case) is None:
        return {"explain": NO_NODES, "live audit": NO_CLUSTER}
    return {"live audit": reason} if (reason := _not_replayable(case)) else {}


def _undecodable(case: Path) -> bool:
    found, _ = strict_problems(_object(case), kube_schema())
    return any(r.rule != "resourceName" for r in found)


def _inventory(case: Path) -> Path | None:
    if (case / "inventory.yaml").is_file():
        return case / "inventory.yaml"
    if (case / "inventory.ref").is_file():
        return SHARED_INVENTORIES / f"{_ref(case, 'inventory.ref')}.yaml"
    return None


def _object(case: Path) -> dict[str, Any]:
    """The case's object in the namespace its request names, as the API server stores it."""
    obj: dict[str, Any] = _read_yaml(case / "object.yaml")
    namespace = _request(case).get("namespace")
    if namespace:
        obj.setdefault("metadata", {})["namespace"] = namespace
    return obj


def _keys(findings: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(f["rule"], f["check"], f["action"]) for f in findings]


def _files(case: Path, tmp_path: Path) -> list[str]:
    manifest = tmp_path / "object.yaml"
    manifest.write_text(yaml.safe_dump(_object(case)))
    inventory = _inventory(case)
    given = ["--rules", str(rules_dir(case)), "-o", "json", "-f", str(manifest)]
    return [*given, "--inventory", str(inventory)] if inventory else given


def by_check(case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Verdict:
    main(["check", *_files(case, tmp_path)])
    (result,) = json.loads(capsys.readouterr().out)
    return result["allowed"], _keys(result["findings"])


def by_test(case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Verdict:
    """``gpu-webhook test`` of a suite that names the case's rules, inventory and object:
    the answer its JSON gives the object, whatever the suite expected of it."""
    manifest = tmp_path / "object.yaml"
    obj = _object(case)
    manifest.write_text(yaml.safe_dump(obj))
    inventory = _inventory(case)
    relative = lambda path: os.path.relpath(path, tmp_path)  # noqa: E731
    suite = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyTest",
        "metadata": {"name": case.name},
        "rules": [relative(rules_dir(case))],
        **({"inventory": relative(inventory)} if inventory else {}),
        "resources": ["object.yaml"],
        "results": [{"resources": [obj["metadata"]["name"]], "result": "allowed"}],
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    main(["test", str(tmp_path / "suite.yaml"), "-o", "json"])
    (result,) = json.loads(capsys.readouterr().out)
    return not result["actual"].startswith("denied"), _keys(result["findings"])


def by_explain(case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Verdict:
    main(["explain", *_files(case, tmp_path)])
    (result,) = json.loads(capsys.readouterr().out)
    return result["webhook"]["allowed"], _keys(result["webhook"]["findings"])


def by_audit(case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Verdict:
    main(["audit", *_files(case, tmp_path)])
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["objects"] == 1, report["summary"]
    if not report["results"]:  # nothing to report: it passed without a finding
        assert report["summary"]["pass"] == 1, report["summary"]
        return True, []
    (result,) = report["results"]
    return result["allowed"], _keys(result["findings"])


def by_server(case: Path) -> Verdict:
    """The admission service's mutating answer to the AdmissionReview the API server sends."""
    inventory = _inventory(case)
    service = AdmissionService(
        rules=RuleStore(str(rules_dir(case))),
        inventory=StaticInventorySource(str(inventory)) if inventory else None,
    )
    request = _request(case)
    body = review(
        _object(case),
        operation=request.get("operation", "CREATE"),
        old=request.get("oldObject"),
        sub_resource=request.get("subResource"),
    )
    outcome = service.review(parse_review(json.dumps(body)), mutate=True)
    allowed = bool(outcome.body["response"]["allowed"])
    return allowed, [(f.rule, f.check, f.action) for f in outcome.answer.findings]


def expected(case: Path) -> Verdict:
    want = _read_yaml(case / "expected.yaml")
    return want["allowed"], _keys(want.get("findings") or [])


# Inventory kinds the replay serves as the API server does (nodes, DRA, RuntimeClasses,
# ResourceQuotas, the cluster-autoscaler status ConfigMap).
REPLAYED = {
    "Node",
    "DeviceClass",
    "ResourceSlice",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "RuntimeClass",
    "ResourceQuota",
    "ConfigMap",
}
DRA_KINDS = {"DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"}
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")
POLICY_KINDS = load_policy(str(ROOT / "rules")).kinds


def _inventory_items(case: Path) -> list[dict[str, Any]]:
    inventory = _inventory(case)
    assert inventory is not None
    return copy.deepcopy(_items_of(inventory))


@functools.cache
def _items_of(inventory: Path) -> list[dict[str, Any]]:
    """The inventory's objects, parsed once per file (collection asks of every case)."""
    items: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(inventory.read_text()):
        if isinstance(doc, dict):
            items.extend(doc["items"] if doc.get("kind") == "List" else [doc])
    return items


def _not_replayable(case: Path) -> str:
    inventory = _inventory(case)
    if inventory is not None and {i["kind"] for i in _items_of(inventory)} - REPLAYED:
        return NOT_REPLAYED
    obj = _object(case)
    kind = POLICY_KINDS.lookup(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    if kind is None and obj.get("kind") not in CLAIM_KINDS:
        return NOT_LISTED
    return ""


def _bare(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in i.items() if k not in ("apiVersion", "kind")} for i in items]


def _list(kind: str, items: list[dict[str, Any]]) -> Body:
    body = {"kind": f"{kind}List", "metadata": {"resourceVersion": "7"}, "items": _bare(items)}
    return Body(json.dumps(body).encode())


def _json_body(body: dict[str, Any]) -> deque[Body]:
    return deque([Body(json.dumps(body).encode())])


def _namespace_of(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("namespace") or "default")


def replayed_cluster(case: Path) -> ReplayServer:
    """The case's inventory and object as the API server lists them, with the namespace's
    labels of its request."""
    items = _inventory_items(case)
    obj = _object(case)
    namespace = obj.setdefault("metadata", {}).setdefault("namespace", "default")
    of = lambda kind: [i for i in items if i["kind"] == kind]  # noqa: E731
    replay = ReplayServer()
    replay.lists.append(_list("Node", of("Node")))
    labels = _request(case).get("namespaceLabels") or {}
    ns = {"metadata": {"name": namespace, "labels": labels}}
    replay.namespace_lists.append(_list("Namespace", [ns]))
    replay.runtime_class_lists.append(_list("RuntimeClass", of("RuntimeClass")))
    replay.quota_lists.append(_list("ResourceQuota", of("ResourceQuota")))
    for configmap in of("ConfigMap"):
        replay.routes[CA_STATUS_PATH] = _json_body(configmap)
    claims = [obj] if obj.get("kind") in CLAIM_KINDS else []
    if DRA_KINDS & {i["kind"] for i in items} or claims:
        replay.dra_served = True
        for kind, path in PATHS.items():
            mine = [c for c in claims if c["kind"] == kind]
            # The case's object stands for an inventory item of the same name: one object.
            named = {(_namespace_of(c), c["metadata"].get("name")) for c in mine}
            listed = [
                *(
                    i
                    for i in of(kind)
                    if (_namespace_of(i), i["metadata"].get("name")) not in named
                ),
                *mine,
            ]
            # Listed twice: once for the view, once more for the audit of claim objects.
            replay.dra_lists[path.rsplit("/", 1)[1]] = deque([_list(kind, listed)] * 2)
    core = ["pods"] if obj.get("kind") == "Pod" and obj.get("apiVersion") == "v1" else []
    replay.routes["/api/v1"] = _json_body(
        {"kind": "APIResourceList", "resources": [{"name": r} for r in core]}
    )
    kind = POLICY_KINDS.lookup(str(obj["apiVersion"]), str(obj["kind"]))
    if core:
        replay.routes["/api/v1/pods"] = deque([_list("Pod", [obj])])
    elif kind is not None:
        version = str(obj["apiVersion"])
        replay.routes[f"/apis/{kind.group}"] = _json_body(
            {"preferredVersion": {"groupVersion": version}}
        )
        replay.routes[f"/apis/{version}"] = _json_body({"resources": [{"name": kind.resource}]})
        replay.routes[f"/apis/{version}/{kind.resource}"] = deque([_list(str(obj["kind"]), [obj])])
    return replay


def by_live_audit(case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Verdict:
    """``audit`` of the replayed cluster: the object's own entry."""
    replay = replayed_cluster(case).start()
    try:
        config = kubeconfig(tmp_path, replay.url)
        main(["audit", "--kubeconfig", config, "--rules", str(rules_dir(case)), "-o", "json"])
    finally:
        replay.stop()
    report = json.loads(capsys.readouterr().out)
    obj = _object(case)
    name = str(obj["metadata"].get("name") or obj["metadata"].get("generateName") or "")
    mine = [r for r in report["results"] if (r["kind"], r["name"]) == (obj["kind"], name)]
    assert report["summary"]["objects"] >= 1, report
    if not mine:  # nothing to report: it passed without a finding
        return True, []
    assert len(mine) == 1, mine
    (result,) = mine
    return result["allowed"], _keys(result["findings"])


COMMANDS = {"check": by_check, "explain": by_explain, "audit": by_audit, "test": by_test}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in case_dirs()])
def test_every_command_gives_the_golden_answer(
    case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skip = differs(case)
    server = by_server(case)
    if not _request(case).get("namespaceLabels"):  # else: NAMESPACE_LABELS
        assert server == expected(case), "server"
    answers = {
        name: command(case, tmp_path, capsys)
        for name, command in COMMANDS.items()
        if name not in skip
    }
    assert answers == dict.fromkeys(answers, server)


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c.name)
        for c in case_dirs()
        if not {"audit", "live audit"} & set(differs(c))
    ],
)
def test_a_live_audit_of_the_case_replayed_as_a_cluster_gives_the_golden_answer(
    case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replayed cluster lists the namespace with its request's labels: the live audit
    sees what the case says, so its answer is the case's own."""
    assert by_live_audit(case, tmp_path, capsys) == expected(case)


def test_a_case_is_excused_from_a_command_only_for_a_stated_reason() -> None:
    reasons = {reason for case in case_dirs() for reason in differs(case).values()}
    assert reasons <= {NOT_A_CREATE, NO_NODES, NO_CLUSTER, NOT_REPLAYED, NOT_LISTED, UNDECODABLE}
    # Most cases hold every command to the server's answer, and the live audit to theirs.
    cases = case_dirs()
    assert sum(1 for case in cases if not set(differs(case)) - {"live audit"}) > len(cases) // 2
    assert sum(1 for case in cases if not differs(case)) > len(cases) // 3


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c.name) for c in case_dirs() if _undecodable(c)]
)
def test_an_object_the_api_server_cannot_decode_is_unusable_to_check_as_to_kubectl(
    case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", *_files(case, tmp_path)]) == 2
    (result,) = json.loads(capsys.readouterr().out)
    assert result["status"] == "unusable"
    assert "refuses it as written (kubectl apply)" in result["error"]


DRA_EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "dra"
DRA = SHARED_INVENTORIES / "dra.yaml"


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code = main([*args, "--rules", "rules", "-o", "json", "--inventory", str(DRA)])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "example", [pytest.param(p, id=p.name) for p in sorted(DRA_EXAMPLES.glob("*.yaml"))]
)
def test_a_file_of_claim_templates_and_their_pods_gets_one_answer_from_each_command(
    capsys: pytest.CaptureFixture[str], example: Path
) -> None:
    """NVIDIA's DRA examples hold the claim template beside the pod that names it: every
    command sees the template, as the cluster would once the file is applied."""
    check_code, checked = _json(capsys, "check", "-f", str(example))
    audit_code, audited = _json(capsys, "audit", "-f", str(example))
    _, explained = _json(capsys, "explain", "-f", str(example))

    denied = {(r["kind"], r["name"]) for r in checked if not r["allowed"]}
    assert {(r["kind"], r["name"]) for r in audited["results"] if not r["allowed"]} == denied
    assert {(e["kind"], e["name"]) for e in explained if not e["webhook"]["allowed"]} == denied
    assert (audit_code, audited["summary"]["objects"]) == (check_code, len(checked))
    for e in explained:
        assert "missingClaim" not in {f["check"] for f in e["webhook"]["findings"]}, e


def test_audit_of_a_directory_counts_its_objects_as_check_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    check_code, checked = _json(capsys, "check", "-f", str(DRA_EXAMPLES))
    audit_code, audited = _json(capsys, "audit", "-f", str(DRA_EXAMPLES))

    assert audited["summary"]["objects"] == len(checked) == 11
    assert audited["summary"]["deny"] == sum(1 for r in checked if not r["allowed"]) == 2
    assert audit_code == check_code == 1


def test_explain_of_a_pod_asking_through_a_claim_template_in_its_file_says_what_it_asks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    example = str(DRA_EXAMPLES / "gpu-test2.yaml")
    main(["explain", "--rules", "rules", "-f", example, "--inventory", str(DRA)])
    out = capsys.readouterr().out
    assert "requests devices of gpu.nvidia.com through its ResourceClaims" in out
    assert "requests no GPU resource" not in out
    assert "missingClaim" not in out
