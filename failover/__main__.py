"""``python -m failover``: the command line, as the ``failover`` console script runs it."""

from .cli import main

raise SystemExit(main())
