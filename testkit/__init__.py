"""Test doubles for the NRI stub: an in-process fake runtime speaking the real wire protocol.

Not part of the installed package; used by tests/ and benchmarks/."""
