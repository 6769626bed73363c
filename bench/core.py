"""Core benchmark: rota against stdlib ``sched`` and the raw heap floor, virtual time.

The same workloads as ``peers.py`` (see its docstring for the method), for
the three peers that need nothing beyond the standard library: quick to run
after a change to the engine. ``bench/instructions.py`` counts instructions
instead of time, for changes too small for wall-clock noise.

Usage: ``python bench/core.py [--quick] [--no-save]``.
"""

from __future__ import annotations

import sys

import peers

if __name__ == "__main__":
    peers.main(sys.argv[1:], only=("floor", "sched", "rota"), name="core")
