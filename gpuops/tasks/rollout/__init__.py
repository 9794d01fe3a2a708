"""Serving rollout, the analysis half (issue 18): what a rollout between two InferencePools
reads and decides, without the flow.

- `objects` (pure): the served API versions, InferencePools (v1 and the older v1alpha2 shape),
  their model servers and the HTTPRoute rules that send them traffic, as plain data; the JSON
  patch that moves a route's weight split from the old pool to the new one.
- `read_objects` (I/O): those objects read from the cluster.
- `metrics` (pure): which vLLM metric names a pool's pods expose (they were renamed between
  versions), the PromQL for one pool over one analysis window, the window's figures.
- `read_metrics` (I/O): those figures read from Prometheus.
- `gates` (pure): gates parsed from parameters, a window judged against the old version's.
"""
