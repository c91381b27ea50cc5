"""seeder's state as a ``torch.distributed.checkpoint`` (DCP) ``Stateful``: ``dcp.save`` /
``dcp.load`` from every rank.

:class:`SeederStateful` holds every rank's :meth:`seeder.Seeder.state_dict` in one opaque entry
(gathered on every rank under a process group, so the entry is the same on all of them and DCP
writes it once). Loading gives each rank its own entry on the same world size; on another one,
a state whose loaders are elastic moves (``docs/elastic.md``), others are refused.

Example::

    dcp.save({"model": model.state_dict(), "seeder": SeederStateful()}, checkpoint_id=path)
    dcp.load({"model": model.state_dict(), "seeder": SeederStateful()}, checkpoint_id=path)
"""

from __future__ import annotations

import io
from typing import Any, Optional

import torch
import torch.distributed

from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.distributed import process_group_active
from seeder._state.format import GATHERED_FORMAT

__all__ = ["SeederStateful"]


class SeederStateful:
    """A DCP ``Stateful`` over a :class:`seeder.Seeder`.

    Put it in the state dict given to ``dcp.save`` and ``dcp.load``, on every rank.

    Args:
        seeder: the :class:`seeder.Seeder` to save and load; the default one when ``None``.
        allow_world_change: passed to :meth:`seeder.Seeder.load_state_dict`: load a
            checkpoint of another world size (elastic loaders only).

    Raises:
        TypeError: ``seeder`` is not a :class:`seeder.Seeder`.

    Example:
        >>> import tempfile, torch.distributed.checkpoint as dcp, seeder
        >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 4)
        >>> folder = tempfile.mkdtemp()
        >>> _ = dcp.save({"seeder": SeederStateful(s)}, checkpoint_id=folder)
        >>> t = seeder.Seeder(); t.init(3)
        >>> dcp.load({"seeder": SeederStateful(t)}, checkpoint_id=folder)
        >>> t.last_reseed
        (1, 4)
    """

    def __init__(
        self, seeder: Optional[Seeder] = None, *, allow_world_change: bool = False
    ) -> None:
        self.seeder = resolve_seeder(seeder)
        self.allow_world_change = allow_world_change

    def state_dict(self) -> dict[str, Any]:
        """Every rank's seeder state, serialised with ``torch.save``, the same on every rank.

        Under a process group it is a collective: every rank calls it (``dcp.save`` does).

        Returns:
            ``{"ranks": bytes}``: one opaque entry, which DCP writes once.

        Example:
            >>> import seeder
            >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 0)
            >>> sorted(SeederStateful(s).state_dict())
            ['ranks']
        """
        s = self.seeder
        own = s.state_dict()
        ranks: list[Any] = [own]
        if process_group_active() and s.world_size > 1:
            ranks = [None] * s.world_size
            torch.distributed.all_gather_object(ranks, own)
        buf = io.BytesIO()
        torch.save(
            {
                "format": GATHERED_FORMAT,
                "version": own["version"],
                "world_size": len(ranks),
                "ranks": ranks,
            },
            buf,
        )
        return {"ranks": buf.getvalue()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load this rank's entry; on another world size, what moves.

        Args:
            state: what :meth:`state_dict` returned when the checkpoint was saved.

        Raises:
            seeder.StateError: the state does not fit this run (see
                :meth:`seeder.Seeder.load_state_dict`); nothing was changed.

        Example:
            >>> import random, seeder
            >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 0)
            >>> saved = SeederStateful(s).state_dict(); first = random.random()
            >>> SeederStateful(s).load_state_dict(saved); random.random() == first
            True
        """
        gathered = torch.load(io.BytesIO(state["ranks"]), weights_only=True)
        self.seeder.load_state_dict(gathered, allow_world_change=self.allow_world_change)
