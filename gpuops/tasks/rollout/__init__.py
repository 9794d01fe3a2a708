"""Serving rollout, the analysis half (issue 18): what a rollout between two InferencePools
reads, writes and decides, without the flow.

- `objects` (pure): the served API versions, InferencePools (v1 and the older v1alpha2 shape),
  their model servers, member pods and the HTTPRoute rules naming them, as plain data.
- `weights` (pure): a validated (old, new) split and the JSON patch that puts it on a route.
- `read_objects` (I/O): those objects read from the cluster, the patch applied.
- `metrics` (pure): which vLLM names a pool's pods expose (they were renamed between
  versions), the PromQL for one pool over one analysis window, the window's figures.
- `read_metrics` (I/O): those figures read from Prometheus.
- `gates` (pure): gates parsed from parameters, a window judged against the old version's.
- `report` (pure): a verdict as table rows and fixed-width text.
"""
