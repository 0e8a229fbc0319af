"""DRA device selectors in CEL: the values a selector reads, the environment that
evaluates them as Kubernetes' does, and the budget that bounds the work."""
