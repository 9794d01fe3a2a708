"""Capacity pre-warm: demand history (demand.py), its forecast (forecast.py), the cost-optimal
plan (plan.py), the node counts to hold now (prewarm.py), what each pool has (pool_state.py),
the plan as node pool actions (pool_actions.py), and the run's report (report.py)."""
