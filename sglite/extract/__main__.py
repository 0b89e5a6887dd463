"""`python -m sglite.extract ...`, the same as `sglite extract ...`."""
import sys

from .cli import main

sys.exit(main())
