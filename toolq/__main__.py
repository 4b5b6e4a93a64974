"""`python -m toolq`: the `toolq` command."""

import sys

from toolq.commands.cli import main

sys.exit(main())
