"""Framework integrations: each module is imported only when used."""
