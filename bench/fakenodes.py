"""Realistic Node objects for benchmarks: the label, annotation and status sizes of real nodes.

Sizes follow what managed GPU clusters show: 25-30 labels on CPU nodes, 60-70 on GPU nodes
(GPU Feature Discovery and Node Feature Discovery), managedFields, a list of cached images,
and about 10-14 KB of JSON per node.
"""

from __future__ import annotations

import json
import random
from typing import Any

GPU_KINDS = (
    # product, count, memory MiB, share of GPU nodes, mig strategy, replicas
    ("NVIDIA-A100-SXM4-80GB", 8, 81920, 0.35, "none", 1),
    ("NVIDIA-H100-80GB-HBM3", 8, 81920, 0.25, "none", 1),
    ("NVIDIA-H100-80GB-HBM3", 8, 81920, 0.05, "mixed", 1),
    ("Tesla-T4", 4, 15360, 0.20, "none", 4),
    ("NVIDIA-L4", 1, 23034, 0.15, "none", 1),
)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def _base_labels(name: str, index: int, rng: random.Random, instance_type: str) -> dict[str, str]:
    zone = ZONES[index % len(ZONES)]
    return {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": instance_type,
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": "us-east-1",
        "failure-domain.beta.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": zone,
        "topology.ebs.csi.aws.com/zone": zone,
        "k8s.io/cloud-provider-aws": "a3f9c2e1d4b5a6978877665544332211",
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        "eks.amazonaws.com/nodegroup": f"ng-{instance_type.replace('.', '-')}",
        "eks.amazonaws.com/nodegroup-image": "ami-0a1b2c3d4e5f67890",
        "eks.amazonaws.com/sourceLaunchTemplateId": "lt-0123456789abcdef0",
        "eks.amazonaws.com/sourceLaunchTemplateVersion": "7",
        "alpha.eksctl.io/cluster-name": "training-prod",
        "alpha.eksctl.io/nodegroup-name": f"ng-{instance_type.replace('.', '-')}",
        "node.kubernetes.io/lifecycle": "normal",
        "topology.k8s.aws/zone-id": f"use1-az{index % 3 + 1}",
        "topology.k8s.aws/network-node-layer-1": f"nn-{rng.getrandbits(40):010x}",
        "topology.k8s.aws/network-node-layer-2": f"nn-{rng.getrandbits(40):010x}",
        "topology.k8s.aws/network-node-layer-3": f"nn-{rng.getrandbits(40):010x}",
        "k8s.amazonaws.com/instance-id": f"i-{rng.getrandbits(64):016x}",
    }


def _gpu_labels(product: str, count: int, memory: int, mig: str, replicas: int) -> dict[str, str]:
    labels = {
        "nvidia.com/cuda.driver-version.full": "550.90.07",
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "90",
        "nvidia.com/cuda.driver-version.revision": "07",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "90",
        "nvidia.com/cuda.driver.rev": "07",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gfd.timestamp": "1732890000",
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.deploy.container-toolkit": "true",
        "nvidia.com/gpu.deploy.dcgm": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        "nvidia.com/gpu.deploy.node-status-exporter": "true",
        "nvidia.com/gpu.deploy.operator-validator": "true",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.machine": "p4d.24xlarge",
        "nvidia.com/gpu.memory": str(memory),
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.sharing-strategy": "time-slicing" if replicas > 1 else "none",
        "nvidia.com/mig.capable": "true" if "100" in product else "false",
        "nvidia.com/mig.strategy": mig,
        "nvidia.com/mps.capable": "false",
        "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",
        "feature.node.kubernetes.io/cpu-cpuid.AVX2": "true",
        "feature.node.kubernetes.io/cpu-hardware_multithreading": "true",
        "feature.node.kubernetes.io/kernel-version.full": "5.10.225-213.878.amzn2.x86_64",
        "feature.node.kubernetes.io/kernel-version.major": "5",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/system-os_release.ID": "amzn",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "2",
    }
    if mig == "mixed":
        labels["nvidia.com/mig.config"] = "all-balanced"
        labels["nvidia.com/mig.config.state"] = "success"
    return labels


def _images(rng: random.Random) -> list[dict[str, Any]]:
    repos = (
        "nvcr.io/nvidia/pytorch",
        "nvcr.io/nvidia/k8s-device-plugin",
        "nvcr.io/nvidia/gpu-feature-discovery",
        "nvcr.io/nvidia/dcgm-exporter",
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni",
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/kube-proxy",
        "registry.k8s.io/pause",
        "quay.io/prometheus/node-exporter",
    )
    return [
        {
            "names": [
                f"{repo}@sha256:{rng.getrandbits(256):064x}",
                f"{repo}:v{i}.{rng.randint(0, 9)}",
            ],
            "sizeBytes": rng.randint(10**6, 10**10),
        }
        for i, repo in enumerate(repos * 2)
    ]


def node(index: int, *, rng: random.Random, gpu: tuple[Any, ...] | None, rv: int) -> dict[str, Any]:
    name = f"ip-10-{index // 65536 % 256}-{index // 256 % 256}-{index % 256}.ec2.internal"
    instance_type = "p4d.24xlarge" if gpu else "m6i.8xlarge"
    labels = _base_labels(name, index, rng, instance_type)
    allocatable = {
        "cpu": "95690m" if gpu else "31750m",
        "ephemeral-storage": "1938358165147",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "1176389268Ki" if gpu else "127560188Ki",
        "pods": "250" if gpu else "110",
    }
    taints: list[dict[str, str]] = []
    if gpu:
        product, count, memory, _share, mig, replicas = gpu
        labels.update(_gpu_labels(product, count, memory, mig, replicas))
        allocatable["nvidia.com/gpu"] = str(count * replicas)
        allocatable["vpc.amazonaws.com/efa"] = "4"
        if mig == "mixed":
            allocatable["nvidia.com/gpu"] = "0"
            allocatable["nvidia.com/mig-1g.10gb"] = str(count * 7)
            allocatable["nvidia.com/mig-3g.40gb"] = str(count * 2)
        taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    capacity = dict(allocatable)
    capacity["cpu"] = "96" if gpu else "32"
    annotations = {
        "alpha.kubernetes.io/provided-node-ip": f"10.0.{index // 256 % 256}.{index % 256}",
        "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-{index:017x}"}),
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "nfd.node.kubernetes.io/feature-labels": ",".join(
            k.split("/", 1)[1] for k in labels if k.startswith("feature.node")
        ),
        "nfd.node.kubernetes.io/master.version": "v0.15.4",
        "nfd.node.kubernetes.io/worker.version": "v0.15.4",
    }
    conditions = [
        {
            "type": kind,
            "status": "False",
            "lastHeartbeatTime": "2026-11-29T14:55:04Z",
            "lastTransitionTime": "2026-11-29T10:12:44Z",
            "reason": f"KubeletHasSufficient{kind.removesuffix('Pressure')}",
            "message": f"kubelet has sufficient {kind.lower()} available",
        }
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "lastHeartbeatTime": "2026-11-29T14:55:04Z",
            "lastTransitionTime": "2026-11-29T10:13:05Z",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    )
    return {
        "metadata": {
            "name": name,
            "uid": f"{rng.getrandbits(128):032x}",
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-11-29T10:12:40Z",
            "labels": labels,
            "annotations": annotations,
            "managedFields": [
                {
                    "manager": manager,
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-29T14:55:04Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {f"f:{k}": {} for k in list(labels)[:20]}}
                    },
                }
                for manager in ("kubelet", "nfd-master", "gpu-feature-discovery")
            ],
        },
        "spec": {"providerID": f"aws:///us-east-1a/i-{index:017x}", "taints": taints},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 256 % 256}.{index % 256}"},
                {"type": "Hostname", "address": name},
                {"type": "InternalDNS", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{rng.getrandbits(128):032x}",
                "systemUUID": f"{rng.getrandbits(128):032x}",
                "bootID": f"{rng.getrandbits(128):032x}",
                "kernelVersion": "5.10.225-213.878.amzn2.x86_64",
                "osImage": "Amazon Linux 2",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.30.4-eks-a737599",
                "kubeProxyVersion": "v1.30.4-eks-a737599",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": _images(rng),
        },
    }


def cluster(count: int, *, gpu_share: float = 0.6, seed: int = 7) -> list[dict[str, Any]]:
    """``count`` nodes: ``gpu_share`` of them GPU nodes in the mix of ``GPU_KINDS``."""
    rng = random.Random(seed)
    nodes = []
    for index in range(count):
        gpu = None
        if rng.random() < gpu_share:
            pick = rng.random()
            for kind in GPU_KINDS:
                pick -= kind[3]
                if pick <= 0:
                    gpu = kind
                    break
            else:
                gpu = GPU_KINDS[0]
        nodes.append(node(index, rng=rng, gpu=gpu, rv=1000 + index))
    return nodes
