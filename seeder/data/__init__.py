"""The data path: the sampler, its keyed permutation, ``DataLoader``, worker seeding and DALI pipelines.

Importing ``seeder.data`` loads no torch; each module is imported by name (``seeder.data.dali``).
"""
