"""Bad user input: `UsageError` (one line on stderr, exit 2, nothing changed). A module of its own, so
the seams and every subcommand raise it without importing the command line."""
from __future__ import annotations

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad user input: one line, exit 2, nothing changed."""
