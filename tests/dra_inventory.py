"""A large DRA inventory, as NVIDIA's DRA driver publishes one (issue 35): ``nodes`` nodes,
each with one ResourceSlice of ``devices`` GPUs whose attributes are those of
tests/cases/_inventories/dra.yaml (recorded from the driver), a uuid and bus id per device."""

from __future__ import annotations

import random
import uuid
from typing import Any

# The DeviceClass NVIDIA's DRA driver installs for whole GPUs.
GPU_CLASS: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ]
    },
}


def _device(index: int, rnd: random.Random) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{uuid.UUID(int=rnd.getrandbits(128))}"},
            "productName": {"string": "NVIDIA A100-SXM4-80GB"},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Ampere"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "driverVersion": {"version": "570.124.6"},
            "cudaDriverVersion": {"version": "12.8.0"},
            "pcieBusID": {"string": f"0000:{index:02x}:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{index // 16:02x}"},
            "index": {"int": index},
            "minor": {"int": index},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def large_dra_inventory(nodes: int = 200, devices: int = 128) -> dict[str, Any]:
    """A ``kubectl get nodes,deviceclasses,resourceslices -o json`` list."""
    rnd = random.Random(35)
    items: list[dict[str, Any]] = []
    for n in range(nodes):
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"dra-{n}",
                    "labels": {"kubernetes.io/hostname": f"dra-{n}"},
                },
                "status": {
                    "allocatable": {"cpu": "254", "memory": "2000Gi", "pods": "110"},
                    "capacity": {"cpu": "256", "memory": "2048Gi", "pods": "110"},
                },
            }
        )
    items.append(GPU_CLASS)
    for n in range(nodes):
        items.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"dra-{n}-gpu.nvidia.com"},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": f"dra-{n}",
                    "pool": {"name": f"dra-{n}", "generation": 1, "resourceSliceCount": 1},
                    "devices": [_device(i, rnd) for i in range(devices)],
                },
            }
        )
    return {"apiVersion": "v1", "kind": "List", "items": items}
