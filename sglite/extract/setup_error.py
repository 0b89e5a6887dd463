"""The one error type of `sglite extract`'s setup."""
from __future__ import annotations


class SetupError(Exception):
    """A problem found before any document runs (bad schema, input, output, model or server): the CLI prints
    its message as one line on stderr and exits with status 2. The message names the problem and the fix."""
