"""From a party file to that party's role, through the protocol registry.

``islands party`` reads the party file and the federation file (:mod:`islands.deploy.config`),
then asks the protocol's :class:`~islands.protocols.ProtocolSpec` (found by name in
:data:`islands.protocols.REGISTRY`) to check the federation's section, pick this party's
role and bind it to the party's own files. Deployment knows no protocol's internals: each
protocol's ``spec`` module documents its section's keys, its roles and the files each
role reads and writes. A deployed run and an in-process run with the same inputs and
seeds compute the same numbers, because both run the same role functions.
"""

from __future__ import annotations

from islands.deploy.config import PartyConfig
from islands.protocols import Deployment, Prepared, spec

__all__ = ["Prepared", "deployment", "prepare"]


def deployment(config: PartyConfig, *, resume: bool = False) -> Deployment:
    """Return what this party brings to the run, in the registry's neutral form."""
    fed = config.federation
    return Deployment(party=config.name, parties=tuple(fed.parties), options=fed.options,
                      where=f"federation file {fed.source} [{fed.protocol}]",
                      output=config.output, data=config.data, labels=config.labels,
                      ids=config.ids, predict=config.predict, resume=resume,
                      source=config.source)


def prepare(config: PartyConfig, *, resume: bool = False) -> Prepared:
    """Load this party's data and bind its role; every error comes before any connection."""
    return spec(config.federation.protocol).prepare(deployment(config, resume=resume))
