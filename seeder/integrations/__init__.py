"""Framework integrations: ``lightning``, ``transformers``, ``accelerate`` and ``dcp``.

Each module imports its framework only when it is imported; ``import seeder`` imports none.
"""
