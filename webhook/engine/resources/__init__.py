"""What the cluster offers, in the units kube-scheduler and the device plugins count: the node
inventory (shapes of nodes, their allocatable, taints and labels), what one unit of a GPU
resource is on a node (whole GPU, shared slot, MIG slice), DRA device classes, slices and
their CEL selectors, and the request vector a node is measured against (``fit``).

May import ``kube`` only.
"""
