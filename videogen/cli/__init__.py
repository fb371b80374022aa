"""The `videogen` command line: one module per command, `main` dispatches."""

from videogen.cli.main import main

__all__ = ["main"]
