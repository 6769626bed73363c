"""Floor 0: the deterministic core. The engine and its tables, the run queue, the
policies' protocols, the checks of every argument; no clock is read, no thread started,
no I/O done here (``tests/test_api.py``), and nothing above is imported."""
