"""The one door for every change: `perform(action)` (perform.py) and the actions made
through it — cluster objects (kube.py), node pool sizes (nodepools.py) — plus the drain
plan that decides which of them a drain takes (drain.py, pure)."""
