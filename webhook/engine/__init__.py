"""The policy engine: plain data in, decision and patch out.

Nothing in this package reads files, clocks, the environment or the network, so every
decision can be reproduced from its inputs (and tested without a cluster).

Its sub-packages are layers, each importing only those below it (an import-linter contract
in pyproject.toml holds them to it; docs/architecture.md draws them):

    evaluation    the entry point: one object in, a decision out
    enforcement   checks, mutations, GPU access control
    scheduling    where a pod can land: scheduler filters, DRA allocation
    demand        what a pod asks of GPUs, and how containers reach them
    policy        the rule set as data, findings and decisions
    resources     what nodes and DRA devices offer, and the request vector
    kube          Kubernetes' own semantics: quantities, selectors, kinds, patches
"""
