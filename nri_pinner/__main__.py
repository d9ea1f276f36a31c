"""`python -m nri_pinner ...`: what the pre-installed plugin launcher runs (no PATH, no console script)."""

import sys

from .cli import main

sys.exit(main())
