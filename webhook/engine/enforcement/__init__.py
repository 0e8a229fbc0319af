"""What the policy does to a pod: the built-in and rule checks (findings worded as what is
wrong and what to change), the mutations (each idempotent), and GPU access control, which
combines both.

May import every layer below it: ``scheduling``, ``demand``, ``policy``, ``resources``, ``kube``.
"""
