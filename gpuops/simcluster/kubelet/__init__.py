"""The kubelet of every node: pod lifecycle, probes, restarts, logs, kubelet faults."""
