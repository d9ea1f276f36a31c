"""The checkpoint file: its format on disk (file.py) and the writer thread (writer.py)."""
