"""kube-controller-manager: the workload, disruption, garbage and node controllers."""
