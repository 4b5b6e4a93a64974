"""`python -m toolq`: the `toolq` command."""

import sys

from toolq.cli import main

sys.exit(main())
