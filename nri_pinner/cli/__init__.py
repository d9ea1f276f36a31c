"""The `nri-pinner` command line: the parser and dispatch (``main``), `status` (``status``), `install`,
`enable-nri`, `simulate` (``simulate``, ``simulate_devices_memory``) and the man page and completions
(``man_and_completions``).
`python -m nri_pinner.cli` runs it like `python -m nri_pinner`."""

from .main import main

__all__ = ["main"]
