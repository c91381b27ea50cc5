"""Warning and error categories of seeder (bottom layer: imports nothing of the package)."""

__all__ = ["SeederWarning", "StateError"]


class SeederWarning(UserWarning):
    """Something seeder cannot do as asked; the message says what it did instead.

    Filter it like any warning: ``warnings.simplefilter("error", seeder.SeederWarning)``.

    Example:
        >>> import warnings, seeder
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("error", seeder.SeederWarning)
        ...     s = seeder.Seeder(); s.init(1); s.reseed(1, 0); s.reseed(1, 0)
        Traceback (most recent call last):
        ...
        seeder.SeederWarning: ...
    """


class StateError(ValueError):
    """A saved state that cannot be applied; nothing was changed.

    The message names what does not fit and what to do.

    Example:
        >>> import seeder
        >>> s = seeder.Seeder(); s.init(1)
        >>> try:
        ...     s.load_state_dict({"format": "not a seeder state"})
        ... except seeder.StateError:
        ...     print("refused; the seed is still", s.get_master_seed())
        refused; the seed is still 1
    """


# Tracebacks and reprs name the public path, where users catch them.
SeederWarning.__module__ = "seeder"
StateError.__module__ = "seeder"
