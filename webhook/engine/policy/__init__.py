"""The policy as data: the JSON Schema of rule files, the compiled rule set (matchers,
settings, node pools declared by rule documents), and outcomes as values (findings and the
one function that turns them into a decision).

May import ``resources`` and ``kube``. Checks and mutations, which need to know what pods
ask, live above in ``enforcement``.
"""
