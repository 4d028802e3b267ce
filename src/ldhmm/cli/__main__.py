"""``python -m ldhmm.cli ...``: the ``ldhmm`` command without the console script."""

import sys

from .main import main

sys.exit(main())
