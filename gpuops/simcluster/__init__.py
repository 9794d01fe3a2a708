"""simcluster: the embedded Kubernetes cluster gpuops runs against by default and in its tests.

An HTTP server that speaks the Kubernetes REST API to the official client, kubectl and Helm,
with simulated components behind it, each in the folder of the part of Kubernetes it imitates:

- `core/`: what they share: the store and its resource registry (a strategy per resource),
  clock, events, selectors, patches, informer-style indexes, PDB arithmetic, GPU and node facts
- `apiserver/`: kube-apiserver's HTTP side: routing, lists, watches, deletion, subresources
- `controllers/`: kube-controller-manager's workload, disruption, garbage and node controllers
- `scheduler/`: kube-scheduler: queue, filters, scoring, preemption
- `kubelet/`: every node's kubelet: pod lifecycle, probes, restarts, logs, kubelet faults
- `cloud/`: node pools that grow and shrink like EKS node groups, backed by AWS (moto)
- `metrics/`: the DCGM and vLLM series Prometheus scrapes

Components know `core/`, never each other (import-linter checks it); `cluster.py` builds them
and hands each what it uses. `config.py` types their settings, `scenario.py` loads a scenario
file, `admin.py` is the simulator's own `/admin` API, `server.py` the `gpuops sim serve`
process, `testing.py` a cluster on a thread for tests, `bulk.py` the scale benchmark's loader.
Code outside deployments, bench and tests reaches simcluster only over HTTP.
"""
