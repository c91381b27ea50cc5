"""The data path: the sampler, its keyed permutation, DataLoader worker seeding and DALI pipelines."""
