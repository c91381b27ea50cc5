"""seeder's state as a ``torch.distributed.checkpoint`` (DCP) ``Stateful``: ``dcp.save`` /
``dcp.load`` from every rank.

:class:`SeederStateful` holds every rank's :meth:`seeder.Seeder.state_dict` in one opaque entry
(gathered on every rank under a process group, so the entry is the same on all of them and DCP
writes it once). Loading gives each rank its own entry on the same world size; on another one,
a state whose loaders are elastic moves (``docs/elastic.md``), others are refused.

Example:
    >>> import tempfile, torch.distributed.checkpoint as dcp, seeder
    >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 0)
    >>> d = tempfile.mkdtemp()
    >>> dcp.save({"seeder": SeederStateful(s)}, checkpoint_id=d)   # doctest: +ELLIPSIS
    Metadata(...)
    >>> t = seeder.Seeder(); t.init(3); dcp.load({"seeder": SeederStateful(t)}, checkpoint_id=d)
    >>> t.last_reseed
    (1, 0)
"""

from __future__ import annotations

import io
from typing import Any, Optional

import torch
import torch.distributed

from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.distributed import process_group_active

__all__ = ["SeederStateful"]


class SeederStateful:
    """A DCP ``Stateful`` over a :class:`seeder.Seeder` (the default one unless given).

    ``state_dict()`` is a collective under a process group (every rank calls ``dcp.save``).
    ``allow_world_change`` is passed to :meth:`seeder.Seeder.load_state_dict`.
    """

    def __init__(self, seeder: Optional[Seeder] = None, *, allow_world_change: bool = False):
        self.seeder = resolve_seeder(seeder)
        self.allow_world_change = allow_world_change

    def state_dict(self) -> dict[str, Any]:
        """``{"ranks": bytes}``: every rank's seeder state, serialised with ``torch.save``,
        identical on every rank."""
        s = self.seeder
        own = s.state_dict()
        ranks: list[Any] = [own]
        if process_group_active() and s.world_size > 1:
            ranks = [None] * s.world_size
            torch.distributed.all_gather_object(ranks, own)
        buf = io.BytesIO()
        torch.save(
            {
                "format": "seeder-gathered",
                "version": own["version"],
                "world_size": len(ranks),
                "ranks": ranks,
            },
            buf,
        )
        return {"ranks": buf.getvalue()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load this rank's entry (or, on another world size, what moves):
        see :meth:`seeder.Seeder.load_state_dict`."""
        gathered = torch.load(io.BytesIO(state["ranks"]), weights_only=True)
        self.seeder.load_state_dict(gathered, allow_world_change=self.allow_world_change)
