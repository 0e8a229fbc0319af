"""Namespaces a policy exempts by name, and the ones a namespace creator could take.

An exemption by namespace name (a ``GPUPolicy`` with ``exempt`` whose ``match`` lists
``namespaces``, such as the shipped ``rules/05-gpu-stack-exempt.yaml``) holds for whoever
creates a namespace of that name. Where users may create namespaces (self service,
OpenShift's self-provisioner), a name that does not exist yet is a way around every check
it spares (issue 41). The shipped ValidatingAdmissionPolicy
(``deploy/base/admission-policies/namespace-exemptions.yaml``) reserves the names it lists
for those allowed to exempt namespaces; these warnings say which names are open to be taken
where the cluster is seen, and which patterns no admission policy can reserve.
"""

from __future__ import annotations

from collections.abc import Collection

from webhook.engine.policy.ruleset import Policy, PolicyProblem, Rule

_GLOB = frozenset("*?[")
PATH = "spec.match.namespaces"


def exempted_namespaces(policy: Policy) -> dict[str, tuple[Rule, ...]]:
    """Each namespace name or pattern that some exemption matches by name, with its rules."""
    found: dict[str, list[Rule]] = {}
    for rule in policy.rules:
        if rule.exempt:
            for name in rule.match.namespace_patterns:
                found.setdefault(name, []).append(rule)
    return {name: tuple(rules) for name, rules in found.items()}


def exemption_warnings(policy: Policy, existing: Collection[str] | None) -> list[PolicyProblem]:
    """A warning per exempting rule and namespace pattern (any new namespace that matches it
    is exempt), and, when the cluster's namespaces are known (``existing``), per exempted
    name that does not exist. Nothing about names when they are not known."""
    warnings: list[PolicyProblem] = []
    for name, rules in sorted(exempted_namespaces(policy).items()):
        for rule in rules:
            if _GLOB & set(name):
                warnings.append(
                    PolicyProblem(
                        rule.document,
                        PATH,
                        f"rule {rule.name} exempts every namespace whose name matches "
                        f"{name!r}: whoever may create namespaces can make one and escape "
                        f"{_checks(rule)}; list the names instead (an admission policy "
                        "reserves names, not patterns)",
                    )
                )
            elif existing is not None and name not in existing:
                warnings.append(
                    PolicyProblem(
                        rule.document,
                        PATH,
                        f"rule {rule.name} exempts namespace {name}, which does not exist: "
                        f"whoever creates it escapes {_checks(rule)} unless the admission "
                        "policy gpu-webhook-namespace-exemptions reserves the name "
                        "(docs/deploy.md); remove the names you do not use",
                    )
                )
    return warnings


def _checks(rule: Rule) -> str:
    return ", ".join(sorted(rule.exempt))
