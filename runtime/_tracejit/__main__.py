"""``python -m tracejit``: the ``tracejit`` command (``tracejit.runtime.cli``)."""

import sys

from tracejit.runtime.cli import main

sys.exit(main())
