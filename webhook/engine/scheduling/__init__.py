"""Where a pod can land, as kube-scheduler and the DRA allocator decide: whether it can reach
GPU nodes at all, why one node refuses it (filters in the scheduler's order and words),
whether its DRA claims can ever be allocated, and rules that would leave pods unschedulable.

May import ``demand``, ``policy``, ``resources`` and ``kube``.
"""
