"""``python -m broker_core ...`` runs the ``pubsub`` command (see ``broker_core.cli``)."""

from __future__ import annotations

import sys

from broker_core.cli import main

if __name__ == "__main__":
    sys.exit(main())
