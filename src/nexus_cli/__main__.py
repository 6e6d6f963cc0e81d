"""`python -m nexus_cli ...` is `nexus ...`."""

import sys

from nexus_cli import main

sys.exit(main())
