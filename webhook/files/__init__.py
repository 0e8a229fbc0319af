"""Readers and writers of files: manifests, rule files, inventory files, certificates."""

from webhook.files import celparser

# Every command reads files through this package: the CEL parser's cache is one of them.
celparser.register()
