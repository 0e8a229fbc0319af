"""Rules held against the cluster they run on: label keys no GPU node carries
(``labelkeys``), and values (products, label values, memory, MIG profiles, classes,
namespaces) that nothing in the cluster has, so that a rule denies every pod it matches
(``policyreach``, issue 42).

Part of ``scheduling``: the same imports it may make.
"""
