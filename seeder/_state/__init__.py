"""A seeder's state: its format, the load plan, parts waiting for their owners, a world change,
rollback and the resume check."""
