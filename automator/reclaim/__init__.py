"""The reclaim planner's stages: index, eligibility, fit, splits, ranking, search, reasons, report."""
