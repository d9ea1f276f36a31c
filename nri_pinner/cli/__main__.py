"""`python -m nri_pinner.cli ...`: the CLI as `python -m nri_pinner ...` runs it (nri_pinner/__main__.py, what the
pre-installed plugin launcher runs: no PATH, no console script)."""

import sys

from .main import main

if __name__ == "__main__":  # importing it (tools, tests) must not run the CLI
    sys.exit(main())
