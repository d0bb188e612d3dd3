"""`python -m exporter` runs the gpu-exporter command."""

from exporter.cli import main

raise SystemExit(main())
