"""The policy engine: plain data in, decision and patch out.

Nothing in this package reads files, clocks, the environment or the network, so every
decision can be reproduced from its inputs (and tested without a cluster).
"""
