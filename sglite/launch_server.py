"""`python -m sglite.launch_server [options]`: the same as `sglite serve [options]`."""
from __future__ import annotations

import sys

from sglite.server.launch import main

if __name__ == "__main__":
    sys.exit(main())
