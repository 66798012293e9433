"""``python -m arenad`` is the ``arenad`` command."""

import sys

from arenad.cli import main

sys.exit(main())
