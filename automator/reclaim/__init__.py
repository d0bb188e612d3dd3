"""The reclaim planner: its vocabulary (model), the reclaim annotations, and its stages: index,
eligibility, fit, splits, ranking, search, reasons, report."""
