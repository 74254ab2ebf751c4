"""`python -m textmill.cli ARGS` is `textmill ARGS` (the form the workflow and torchrun start)."""

import sys

from textmill.cli import main

sys.exit(main())
