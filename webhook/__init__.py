"""GPU admission webhook: policy engine, admission server and tools around it."""

__version__ = "0.1.0"
