"""Framework integrations (Lightning, Hugging Face): each module imports its framework only when it
is imported."""
