"""Restart diagnostics: evidence in (evidence.py), a cause out (rules.py and
restart_rules.yaml, conditions.py, diagnose.py), which restarts are reported (filters.py),
the text people read (report.py), who posts it to Slack and keeps the timeline (posting.py,
slack_limits.py, history.py), and the events and trigger that start it (events.py,
trigger.py), and since when a workload is healthy again (recovery.py)."""
