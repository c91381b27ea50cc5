"""The environment variables through which the tools ask a run for their hooks.

``seeder verify`` and ``seeder locate`` set the first three for the runs they start, the user
the last one for ``seeder run``;
:mod:`seeder._run.bootstrap` installs the callbacks each one asks for.

Example:
    >>> ENV_STEPS, ENV_TRACE, ENV_LOCATE, ENV_SNAPSHOT_DIR
    ('SEEDER_STEPS', 'SEEDER_TRACE', 'SEEDER_LOCATE', 'SEEDER_SNAPSHOT_DIR')
"""

__all__ = ["ENV_STEPS", "ENV_TRACE", "ENV_LOCATE", "ENV_SNAPSHOT_DIR"]

#: Where a run's per-step records go (:mod:`seeder._run.steps`); unset: nothing is recorded.
ENV_STEPS = "SEEDER_STEPS"
#: Path prefix of the per-rank trace files (:mod:`seeder._run.trace`); unset: no tracing.
ENV_TRACE = "SEEDER_TRACE"
#: The directory a localisation run writes its operation records to (:mod:`seeder._run.record`).
ENV_LOCATE = "SEEDER_LOCATE"
#: Where rank 0 writes an environment snapshot at ``init`` (``seeder run``'s runs, and any run the
#: tools start).
ENV_SNAPSHOT_DIR = "SEEDER_SNAPSHOT_DIR"
