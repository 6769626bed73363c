"""Floor 3: the runners, the only code that waits or owns loops: they drive a
scheduler's table through :class:`~rota.Tasks`' runner half."""
