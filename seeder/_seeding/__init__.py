"""Seeding: derivation, the RNG adapters, the Seeder, its participants and the default seeder."""
