"""``python -m ldhmm ...``: the ``ldhmm`` command (:mod:`ldhmm.console`)."""

import sys

from .console import main

sys.exit(main())
