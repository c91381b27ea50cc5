"""Warning and error categories of seeder (bottom layer: imports nothing of the package)."""

__all__ = ["SeederWarning", "StateError"]


class SeederWarning(UserWarning):
    """Something seeder cannot do as asked; the message says what it did instead.

    Filter it like any warning: ``warnings.simplefilter("error", seeder.SeederWarning)``.
    """


class StateError(ValueError):
    """A saved state that cannot be applied; nothing was changed."""
