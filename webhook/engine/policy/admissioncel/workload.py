"""GPU quantities in the pod templates of custom workloads, as CEL (issue 43).

The API server refuses a Pod (and a Deployment's, Job's... template) whose extended
resource is requested without a limit, requested unlike its limit, or fractional
(``ValidateResourceRequirements``, pkg/apis/core/validation), but not a PyTorchJob's,
JobSet's or any custom resource's template: their pods fail later, at the controller. The
webhook's ``requestsWithoutLimits``, ``requestsNotEqualLimits`` and ``fractionalQuantity``
catch them at admission; these validations do the same in-process, over the template
locations of the kinds it knows (``kube.workloads``, WorkloadKind rules), for quantities
written plainly (decimals and millis; anything else is left to the webhook)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.engine.kube.workloads import TemplateLocation, WorkloadKind
from webhook.engine.policy.admissioncel.pod import quote, section
from webhook.engine.policy.ruleset import Policy

# Groups whose templates the API server validates itself.
BUILT_IN_GROUPS = frozenset({"", "apps", "batch"})
CHECKS = ("requestsWithoutLimits", "requestsNotEqualLimits", "fractionalQuantity")
# A quantity as written: a decimal, or millis.
PLAIN = quote("^[0-9]{1,15}(\\.[0-9]{1,9})?$|^[0-9]{1,15}m$")
DECIMAL = quote("^[0-9]{1,15}(\\.[0-9]{1,9})?$")
FRACTION = quote("^[0-9]+\\.[0-9]*[1-9][0-9]*$")
MILLIS = quote("^[0-9]+m$")
WHOLE_MILLIS = quote("^([0-9]*000|0+)m$")
MESSAGES = {
    "requestsWithoutLimits": "requests a GPU without a limit",
    "requestsNotEqualLimits": "requests a GPU count other than its limit",
    "fractionalQuantity": "asks for a fraction of a GPU",
}


@dataclass(frozen=True, slots=True)
class WorkloadValidations:
    """The validations of one action, and the resources they are for."""

    action: str
    resource_rules: tuple[Mapping[str, Any], ...]
    validations: tuple[Mapping[str, str], ...]


def _container_ok(check: str, c: str, gpu: str) -> str:
    """True unless container ``c`` has the problem ``check`` names for a GPU resource."""
    req = f"string({c}.resources.requests[r])"
    lim = f"string({c}.resources.limits[r])"
    limited = f"({section(c, 'limits')} && r in {c}.resources.limits)"
    if check == "requestsWithoutLimits":
        return (
            f"!{section(c, 'requests')} || {c}.resources.requests.all(r, !({gpu}) || "
            f"{limited} || !{req}.matches({PLAIN}))"
        )
    if check == "requestsNotEqualLimits":
        return (
            f"!{section(c, 'requests')} || {c}.resources.requests.all(r, !({gpu}) || "
            f"!{limited} || !{req}.matches({DECIMAL}) || !{lim}.matches({DECIMAL}) || "
            f"double({req}) == double({lim}))"
        )
    fractional = f"(v.matches({FRACTION}) || (v.matches({MILLIS}) && !v.matches({WHOLE_MILLIS})))"
    return " && ".join(
        f"(!{section(c, part)} || {c}.resources.{part}.all(r, !({gpu}) || "
        f"![string({c}.resources.{part}[r])].exists(v, {fractional})))"
        for part in ("requests", "limits")
    )


def _walk(expr: str, segments: tuple[str, ...], body: Callable[[str], str], depth: int = 0) -> str:
    """``body`` holds at every node the path reaches; ``*`` is each item of a list or each
    value of a map (``dyn``: a custom resource's schema may say either, or nothing)."""
    if not segments:
        return body(expr)
    head, rest = segments[0], segments[1:]
    if head == "*":
        v = f"x{depth}"
        return (
            f"(type(dyn({expr})) == list ? dyn({expr}).all({v}, "
            f"{_walk(f'dyn({v})', rest, body, depth + 1)}) : type(dyn({expr})) == map ? "
            f"dyn({expr}).all({v}, {_walk(f'dyn({expr})[{v}]', rest, body, depth + 1)}) : true)"
        )
    return f"(!has({expr}.{head}) || {_walk(f'{expr}.{head}', rest, body, depth)})"


def _template_ok(check: str, location: TemplateLocation, gpu: str) -> str:
    def body(template: str) -> str:
        spec = template if location.pod_spec else f"{template}.spec"
        if not location.pod_spec:
            spec_guard = f"!has({template}.spec) || "
        else:
            spec_guard = ""
        lists = " && ".join(
            f"(!has({spec}.{name}) || {spec}.{name}.all(c, {_container_ok(check, 'c', gpu)}))"
            for name in ("containers", "initContainers")
        )
        return f"({spec_guard}({lists}))"

    return _walk("object", location.path, body)


def _custom_kinds(policy: Policy) -> Iterator[WorkloadKind]:
    for kind in policy.kinds:
        if kind.group not in BUILT_IN_GROUPS:
            yield kind


def workload_validations(
    policy: Policy, gpu: str
) -> tuple[list[WorkloadValidations], list[tuple[str, str]]]:
    """The validations per action, and the checks left out (``repair`` is a mutation).
    ``gpu``: whether the resource name ``r`` is a GPU, in CEL."""
    by_action: dict[str, list[Mapping[str, str]]] = {}
    left: list[tuple[str, str]] = []
    kinds = list(_custom_kinds(policy))
    for check in CHECKS:
        action = policy.settings.actions.get(check, "deny")
        if action not in ("deny", "warn", "audit"):
            left.append((check, f"action {action}: a mutation, the webhook's"))
            continue
        for kind in kinds:
            said = " && ".join(f"({_template_ok(check, loc, gpu)})" for loc in kind.locations)
            group = quote(kind.group + "/")
            by_action.setdefault(action, []).append(
                {
                    "expression": f"!(object.apiVersion.startsWith({group}) && "
                    f"object.kind == {quote(kind.kind)}) || ({said})",
                    "message": f"a pod template of this {kind.kind} {MESSAGES[check]} "
                    f"({check}): the API server checks this in Pods only, so its pods would "
                    "fail at the controller. Set whole-GPU limits, and requests equal to "
                    "them or none.",
                    "reason": "Invalid",
                }
            )
    rules = tuple(
        {
            "apiGroups": [kind.group],
            "apiVersions": ["*"],
            "operations": ["CREATE"],
            "resources": [kind.resource],
        }
        for kind in kinds
    )
    made = [WorkloadValidations(a, rules, tuple(v)) for a, v in by_action.items()]
    return made, left
