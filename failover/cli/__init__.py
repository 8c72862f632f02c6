"""The ``failover`` command line (also ``python -m failover``).

Commands: ``demo``, ``inspect``, ``clean``, ``scheduler``, ``dashboard`` and ``ops``, one module
each; ``failover COMMAND --help`` for each.
"""

from .common import render_table
from .main import main

__all__ = ["main", "render_table"]
