"""Two stages. ``where_it_fits``: where a pod template's whole request fits in the snapshot
(kept off the nodes whose device plugin would refuse it, where the object may be patched).
``gpu_checks``, once the pod is patched: the built-in checks of its GPU quantities,
capacity, units and CUDA driver.
"""

from __future__ import annotations

from webhook.engine.enforcement.accesscontrol import Template
from webhook.engine.enforcement.checks import (
    Scope,
    capacity_findings,
    device_findings,
    fit_warnings,
    mig_profile_findings,
    misspelled_findings,
    quantity_findings,
    refused_finding,
    whole_gpus,
)
from webhook.engine.enforcement.cudadrivers import (
    cuda_findings,
    cuda_notices,
    drivers_known,
    gpu_needs,
)
from webhook.engine.enforcement.mutators import keep_off_refusing_nodes
from webhook.engine.evaluation.request import Asked, Review
from webhook.engine.kube.patch import Editor, lookup
from webhook.engine.kube.workloads import Path as WorkloadPath
from webhook.engine.policy.decision import Finding
from webhook.engine.policy.ruleset import Settings
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.fit import Demand, demand_of
from webhook.engine.resources.gpufacts import GPUFacts, SlotRefusal
from webhook.engine.resources.inventory import FitAnswer, Inventory, Placement
from webhook.engine.scheduling.dra import PodClaims
from webhook.engine.scheduling.wholepod import (
    plugin_fit,
    whole_pod_answer,
)

NO_GPU_FACTS = GPUFacts()  # a node's cpu and memory alone: no GPU resource is asked


def where_it_fits(
    review: Review, asked: Asked
) -> tuple[Placement, FitAnswer | None, Finding | None]:
    """The third stage: where the pod can land as the rules placed it, and which nodes there
    take its whole request; none is asked without a snapshot or a GPU. When some nodes it
    can land on would fail it at the device plugin and others would not, it is first kept
    off the former (issue 21), unless the object may not be patched (a Pod UPDATE); where a
    device class serves its GPUs, with the warning that it may still land on such nodes
    (``_served_fit``). The container mutations and the hiding after this stage leave the
    placement as it is."""
    editor, spec_path, pod = review.editor, asked.spec_path, asked.pod
    spec = lookup(editor.doc, spec_path)
    placement = Placement.of(spec)
    snapshot = review.snapshot
    if snapshot is None or not pod.total:
        return placement, None, None
    settings, claims = review.settings, asked.claims
    demand = demand_of(spec, pod.vector, pod.per_container, pod.containers)
    fit = snapshot.fit(placement, demand, settings.device_plugin)
    if claims.served:
        return _served_fit(
            editor,
            spec_path,
            claims,
            fit,
            snapshot=snapshot,
            devices=review.devices,
            settings=settings,
            mutated_by=review.mutated_by,
            mutate=review.mutate,
        )
    if review.mutate and fit.fitting and fit.refused and settings.keep_off_refusing_nodes:
        before = len(editor.ops)
        keep_off_refusing_nodes(editor, spec_path, fit)
        if len(editor.ops) > before:
            review.mutated_by["builtin/keepOffRefusingNodes"] = None
            placement = Placement.of(editor.get(spec_path))
            fit = snapshot.fit(placement, demand, settings.device_plugin)
    return placement, fit, None


def gpu_checks(
    review: Review,
    asked: Asked,
    access: Template,
    placement: Placement,
    fit: FitAnswer | None,
    *,
    refused: Finding | None,
) -> Scope:
    """The fifth stage, on the pod as the webhook leaves it: the built-in checks of its GPU
    quantities, capacity and units, the fit's refusal, the CUDA driver. Returns the pod as
    the later checks read it."""
    editor, spec_path, pod, claims = review.editor, asked.spec_path, asked.pod, asked.claims
    settings, findings = review.settings, review.findings
    # Built by position, on every review: a keyword call costs twice as much.
    scope = Scope(
        where_of(spec_path),
        lookup(editor.doc, spec_path),
        asked.template.labels,
        pod,
        placement,
        settings,
        fit,
        review.kind,
        review.devices,
        bool(claims.claims) and bool(claims.gpu_classes),  # a property: most have none
        claims if claims.held else None,
    )
    findings.extend(gpu_findings(scope, review.snapshot))
    if refused is not None:
        findings.append(refused)
    if fit is not None and fit.fitting and drivers_known(fit):
        findings.extend(cuda_check(editor, scope, access, review.mutated_by, mutate=review.mutate))
        review.template_notices.extend(cuda_notices(pod, settings, fit))
    return scope


def whole_fits(
    claims: PodClaims,
    demand: Demand,
    placement: Placement,
    *,
    snapshot: Inventory,
    devices: DeviceInventory,
    refusal: SlotRefusal,
) -> bool | None:
    """Whether one node takes the whole pod, on the nodes as they are once healed (as the
    ``deviceClaims`` check judges it); None where the claims are not judged there."""
    answer = whole_pod_answer(
        claims,
        demand=demand,
        placement=placement.healed(),
        nodes=snapshot,
        devices=devices,
        refusal=refusal,
    )
    return None if answer is None else answer.fits


# Template paths as findings name them ("spec", "spec.template.spec"): a few per cluster.
_WHERE: dict[WorkloadPath, str] = {}


def where_of(spec_path: WorkloadPath) -> str:
    where = _WHERE.get(spec_path)
    if where is None:
        where = ".".join(map(str, spec_path))
        if len(_WHERE) < 1024:
            _WHERE[spec_path] = where
    return where


def cuda_check(
    editor: Editor,
    scope: Scope,
    access: Template,
    mutated_by: dict[str, None],
    *,
    mutate: bool,
) -> list[Finding]:
    """The cudaDriver check, and its affinity (credited for the log line) unless the
    object is judged as it is (``mutate`` False: a Pod's update)."""
    if scope.fit is None:
        return []
    needs = gpu_needs(scope.pod, scope.settings)
    if not needs:
        return []
    before = len(editor.ops)
    found = cuda_findings(
        editor,
        access.spec_path,
        needs=needs,
        fit=scope.fit,
        settings=scope.settings,
        exempt=access.exempt if mutate else access.exempt | {"cudaAffinity"},
        where=scope.where,
    )
    if len(editor.ops) > before:
        mutated_by["builtin/cudaAffinity"] = None
    return found


def _served_fit(
    editor: Editor,
    spec_path: WorkloadPath,
    claims: PodClaims,
    fit: FitAnswer,
    *,
    snapshot: Inventory,
    devices: DeviceInventory | None,
    settings: Settings,
    mutated_by: dict[str, None],
    mutate: bool,
) -> tuple[Placement, FitAnswer, Finding | None]:
    """The keep-off where a device class serves the pod's GPU resources (KEP-5004): they are
    out of ``fit``'s vector, held as claims, but on a node whose allocatable has them the
    device plugin serves them (``filterExtendedResources``), and may fail a container of
    the pod there. Those nodes are judged with the served amounts (``plugin_fit``); the
    affinity that keeps the pod off them is added only where the pod, so patched, still
    has a node that takes it all (``whole_pod_answer``): never a denial of the webhook's
    own making. Where it may still land on them, a ``sharedGPURequest`` warning says so."""
    placement, demand, refusal = fit.placement, fit.demand, settings.device_plugin
    plugin = plugin_fit(claims, demand=demand, placement=placement, nodes=snapshot, refusal=refusal)
    if not plugin.refused:
        return placement, fit, None
    if mutate and fit.fitting and settings.keep_off_refusing_nodes:
        scratch = Editor(editor.get(spec_path))
        keep_off_refusing_nodes(scratch, (), plugin)
        patched = Placement.of(scratch.doc)
        refit = snapshot.fit(patched, demand, refusal)
        if scratch.ops and refit.fitting and _lands(claims, refit, snapshot, devices, refusal):
            keep_off_refusing_nodes(editor, spec_path, plugin)
            mutated_by["builtin/keepOffRefusingNodes"] = None
            placement, fit = Placement.of(editor.get(spec_path)), refit
            plugin = plugin_fit(
                claims, demand=demand, placement=placement, nodes=snapshot, refusal=refusal
            )
    if not plugin.refused or not _lands(claims, fit, snapshot, devices, refusal):
        return placement, fit, None  # none refuses it, or nothing takes it: a denial says so
    where = where_of(spec_path)
    return placement, fit, refused_finding(plugin, settings=settings, where=where)


def _lands(
    claims: PodClaims,
    fit: FitAnswer,
    snapshot: Inventory,
    devices: DeviceInventory | None,
    refusal: SlotRefusal,
) -> bool:
    """Whether some node the placement admits takes the whole pod, its served resources
    from a device plugin that does not refuse it or from the class's devices; True where
    the webhook cannot tell (no complete slices), as it then denies nothing."""
    if devices is None:
        return True
    fits = whole_fits(
        claims, fit.demand, fit.placement, snapshot=snapshot, devices=devices, refusal=refusal
    )
    return fits is not False


def gpu_findings(scope: Scope, snapshot: Inventory | None) -> list[Finding]:
    """The built-in checks of the pod's GPU quantities, capacity and units."""
    pod, settings = scope.pod, scope.settings
    found: list[Finding] = []
    if pod.problems:
        found.extend(quantity_findings(scope, settings))
    # A pod that fits some class has no unknown resource either: nothing to report.
    if snapshot is not None and scope.fit is not None and not scope.fit.fitting:
        found.extend(capacity_findings(scope, snapshot, settings))
    elif scope.fit is not None and (scope.fit.refused or scope.fit.waiting()):
        found.extend(fit_warnings(scope, settings))
    if snapshot is None and pod.partial:
        found.extend(mig_profile_findings(scope, settings))
    if pod.crowded and not whole_gpus(scope):
        found.extend(device_findings(scope, snapshot, settings))
    for c in pod.containers:  # a loop, not any() over a generator: on every review
        if c.others:
            found.extend(misspelled_findings(scope, snapshot, settings))
            break
    return found
