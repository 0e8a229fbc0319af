"""The engine's entry point: one object, its admission attributes, the policy and an
inventory view in; a decision and the mutated object out. It ties the layers together for
pods, workloads and DRA claim objects, as a pipeline of stages a reader can hold one at a
time:

- ``evaluate``: the entry, and which path an object takes (scale, claim object, Pod
  UPDATE, object);
- ``pipeline``: the stages in order, for one object and for each of its templates;
- ``request``: what the engine is asked, the records the stages pass on (``Review``,
  ``Asked``), and the first stage: what a template asks, the rules that match it, the
  snapshot with its node pools;
- ``mutation``: rule placements, placement for access, repaired requests, container
  mutations; then, after the fit, GPUs hidden from containers that asked for none;
- ``capacity``: where the pod fits; the built-in GPU checks, the CUDA driver;
- ``claims``: what the pod's DRA claims meet; the rules' checks, their unit checks and
  device policy on devices;
- ``workloadtotals``: all pods of a workload together; after admission, gangs and quota;
- ``updates`` (with ``pods/resize`` and ephemeral containers), ``scale``: UPDATEs judged
  on what they change;
- ``claimobjects``, ``references``: ResourceClaim objects and claims not yet seen;
  ``matchconditions``: the CEL that spares the webhook the objects it would not touch.

The top layer: it may import every other sub-package; none imports it.
"""
