"""`python -m automator`: the gpu-automator CLI."""

import sys

from automator.cli import main

sys.exit(main())
