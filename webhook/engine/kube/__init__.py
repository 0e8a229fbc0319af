"""Kubernetes' own semantics, with no GPU knowledge: quantities, label and node selectors,
tolerations, where each kind keeps its pod templates, the objects the API server would
refuse, and the JSON Patch editor.

The bottom layer: it imports nothing else of the engine.
"""
