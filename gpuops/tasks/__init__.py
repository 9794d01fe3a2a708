"""The verbs and the domain logic, grouped by what they are for (DESIGN.md, "Layout").

- `clients/`: one thin module per outside system (Kubernetes, Slack, AWS, Prometheus, the
  Prefect events API), errors mapped to gpuops' own;
- `actions/`: the safe-action layer (`perform`, `SafeAction`) and the cluster and node pool
  changes made through it;
- `approvals/`: asking a person, from Slack or the Prefect UI, and keeping the request's record;
- one package per feature (`restarts/`, `capacity/`, ...): pure logic plus thin wrappers.
  Features share clients, actions and approvals, never each other (import-linter).
- `event_intake.py`: every event-driven flow validates its events through it.
"""
