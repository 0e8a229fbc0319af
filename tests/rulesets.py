"""Rule directories for tests: the shipped rules plus extra GPUPolicy documents."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.builders import RULES

QUOTA = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata:
  name: quota
spec:
  order: 50
  validate:
    - maxGPUsPerPod: {limit}
      action: {action}
"""
MEMORY_LIMIT = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata:
  name: {name}
spec:
  order: 40
  mutate:
    memoryLimit:
      fixed: {fixed}
"""

# A rule that acts on pods asking for no GPU, in one namespace: the match conditions must
# call that namespace's plain pods, and only those.
TEAM_SHM = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata:
  name: team-shm
spec:
  match:
    gpuCount: {min: 0}
    namespaces: [team-a]
  mutate:
    shm: {sizeLimit: 1Gi}
"""


def rules_dir(tmp: Path, *extra: str) -> Path:
    """A copy of the shipped rules in ``tmp/rules`` with ``extra`` documents added."""
    target = tmp / "rules"
    shutil.copytree(RULES, target)
    for index, text in enumerate(extra):
        (target / f"95-extra-{index}.yaml").write_text(text)
    return target


def quota(limit: int, action: str = "deny") -> str:
    return QUOTA.format(limit=limit, action=action)


def memory_limit(fixed: str, *, name: str = "training-memory") -> str:
    """A GPUPolicy (order 40) whose ``mutate.memoryLimit`` is ``fixed``."""
    return MEMORY_LIMIT.format(name=name, fixed=fixed)
