"""``python -m rota``: the ``rota`` command."""

import sys

from rota.cli import main

sys.exit(main())
