"""Readers and writers of files: manifests, rule files, inventory files, certificates."""
