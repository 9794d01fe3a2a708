"""Serving rollout (issue 18): progressive upgrades between InferencePools by HTTPRoute weights,
judged on vLLM metrics against the old version, with approval and automatic rollback.

The analysis:
- `objects` (pure): the served API versions, InferencePools (v1 and the older v1alpha2 shape),
  their model servers, member pods and the HTTPRoute rules naming them, as plain data.
- `weights` (pure): a validated (old, new) split and the JSON patch that puts it on a route.
- `read_objects` (I/O): those objects read from the cluster, the patch applied.
- `metrics` (pure): which vLLM names a pool's pods expose (they were renamed between
  versions), the PromQL for one pool over one analysis window, the window's figures.
- `read_metrics` (I/O): those figures read from Prometheus.
- `gates` (pure): gates parsed from parameters, a window judged against the old version's.
- `report` (pure): a verdict as table rows and fixed-width text.

The rollout:
- `params` (pure): the rollout's parameters, validated into one `RolloutSpec`.
- `derive` (pure): the new version's Deployment, InferencePool and endpoint picker from the old.
- `capacity` (pure): room for the new version on free GPUs, and so the mode.
- `state` (pure): the rollout's record on the HTTPRoute.
- `timeline` (pure): the steps with each gate's numbers, as rows and text.
- `preflight` (I/O): everything read and checked before the first write.
- `actions` (I/O): the rollout's changes as safe actions for `perform()`.
- `warmup` (I/O): Ready and warm, through each replica's own vLLM endpoints.
- `notify` (I/O): the rollback message in Slack.
- `run` (I/O): the course of a rollout, its rollback and its end.
"""
