"""The closed-loop demo (`make demo`, deploy/demo/run_demo.py, docs/demo.md): run (the demo and its
stories), rules (its time-compressed rules, alerts, cluster and scenario), backtest (its backtest over its own
history)."""
