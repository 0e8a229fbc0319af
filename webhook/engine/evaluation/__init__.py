"""The engine's entry point: one object, its admission attributes, the policy and an
inventory view in; a decision and the mutated object out. It ties the layers together for
pods, workloads and DRA claim objects.

The top layer: it may import every other sub-package; none imports it.
"""
