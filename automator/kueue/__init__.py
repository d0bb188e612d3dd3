"""Kueue: idle admitted Workloads give their GPU quota to the Workloads waiting for it (docs/kueue.md).

Pure decisions over the records of automator/objects/kueue.py and the planner's victim rules: which
Workloads wait for GPU quota, which hold it, which of those are idle for a waiting one (every bound pod a
victim by the planner's rules, but for the priority comparison, which is the Workloads'), and what to
write: Kueue's priority boost (`boost`) or `spec.active: false` (`deactivate`). model.py holds the
vocabulary, decide.py the decisions, report.py every rendering of them. Independent of keda/ and dra/.
"""
