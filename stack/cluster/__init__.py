"""The local Kubernetes cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok on loopback, with nodes shaped from a deployment spec (stack/cluster/nodes.py), so `pulumi
up`, the real scheduler and the runbooks' Kubernetes actions run here (docs/cluster.md)."""
