"""Floor 2: the one :class:`~rota.Scheduler` and the :class:`~rota.Tasks` seam with
its in-memory table (the durable table is ``rota.durable``, beside it)."""
