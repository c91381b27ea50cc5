"""The run's environment: deterministic mode, ``seeder run``, environment snapshots and their diff."""
