"""What a pod asks of GPUs: each container's GPU requests and the pod's effective request,
and the ways a container reaches GPUs (asking for one, or through the runtime's
environment and device nodes without asking).

May import ``policy``, ``resources`` and ``kube``.
"""
