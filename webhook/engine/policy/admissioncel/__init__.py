"""The core rules as the API server's own admission policies (issue 43): the
ValidatingAdmissionPolicies and the MutatingAdmissionPolicy generated from the rules that
need no cluster state (``policies``), and the CEL they are written in, over a pod
(``pod``), its GPU access (``access``) and custom workloads' pod templates (``workload``).

Part of ``policy``: it imports only ``policy``, ``resources`` and ``kube``.
"""
