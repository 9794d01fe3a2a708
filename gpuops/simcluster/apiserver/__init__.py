"""kube-apiserver: the Kubernetes REST API over HTTP."""
