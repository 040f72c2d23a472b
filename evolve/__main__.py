"""`python -m evolve ...`: the same command line as `evolve ...`."""

import sys

from evolve.cli.main import main

sys.exit(main())
