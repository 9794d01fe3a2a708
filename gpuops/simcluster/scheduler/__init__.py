"""kube-scheduler: the scheduling queue, filters, scoring and preemption."""
