"""`gpu-automator backtest`: the reclaim policy replayed on a cluster's Prometheus history
(docs/backtest.md)."""
