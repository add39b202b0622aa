"""``python -m broker_core.cli ...`` runs the ``pubsub`` command."""

from __future__ import annotations

import sys

from broker_core.cli import main

if __name__ == "__main__":
    sys.exit(main())
