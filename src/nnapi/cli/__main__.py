"""`python -m nnapi.cli ...`: the `nnapi` command."""
import sys

from .commands import main

sys.exit(main())
