"""Party identities: each party signs, every party verifies, whoever relays the message.

Protocols that must hold against a deviating relay — secure aggregation's consistency
round and its signed keys, the dealing of a shared key through the server — need a
party to check that a message carried by a third party really comes from the party it
names. Each party holds an Ed25519 signing key (``cryptography``) and every party's
public key, and the keys are bound to who the party is:

* in one process (:func:`~islands.runtime.run_local`) the runner makes a key pair per
  party and hands each party its own private key and everyone's public key, the
  in-process stand-in for a deployment's certificates;
* across processes (:mod:`islands.runtime.grpc_transport`) each party makes a fresh key
  pair per run and sends the public key in its hello, which travels directly between
  the two parties over their mutually authenticated TLS channel, so the key is bound to
  the name in the party's certificate (with ``--insecure`` loopback testing, it is not).

Every signature is bound to a purpose (a domain-separation label), so a signature made
for one protocol step can never be replayed as another.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from islands.errors import ProtocolError

__all__ = ["PUBLIC_KEY_BYTES", "SIGNATURE_BYTES", "Identity", "make_identities"]

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
_DOMAIN = b"islands identity v1\x00"


def _signed(purpose: str, message: bytes) -> bytes:
    label = purpose.encode("utf-8")
    return _DOMAIN + len(label).to_bytes(2, "big") + label + message


class Identity:
    """One party's signing key and the public keys of the parties it knows.

    Parameters
    ----------
    name
        The party.
    private
        Its Ed25519 private key.
    publics
        Every known party's raw public key (32 bytes), this party's included.
    """

    def __init__(self, name: str, private: Ed25519PrivateKey,
                 publics: Mapping[str, bytes]) -> None:
        self.name = name
        self._private = private
        self.public = private.public_key().public_bytes_raw()
        listed = publics.get(name)
        if listed is not None and listed != self.public:
            raise ProtocolError(f"the public key listed for {name!r} is not its own",
                                party=name)
        if listed is None or not isinstance(publics, MappingProxyType):
            # a read-only copy, unless the caller's mapping is one already
            # (make_identities: one for all the parties of a run)
            publics = MappingProxyType({**publics, name: self.public})
        # raw keys, shared by every party of a run (one mapping, not one per party: n
        # parties would otherwise hold n² parsed keys, 0.36 GB at a thousand); a key is
        # parsed when this party first verifies its owner's signature
        self._publics = publics
        self._parsed: dict[str, Ed25519PublicKey] = {}

    def knows(self, party: str) -> bool:
        """Whether ``party``'s public key is known."""
        return party in self._publics

    def sign(self, purpose: str, message: bytes) -> bytes:
        """Sign ``message`` for ``purpose``."""
        return self._private.sign(_signed(purpose, message))

    def verify(self, signer: str, purpose: str, message: bytes, signature: object) -> None:
        """Check that ``signer`` signed ``message`` for ``purpose``.

        Raises
        ------
        ProtocolError
            Naming this party, the signer and the purpose, if the signer is unknown or
            the signature does not verify.
        """
        key = self._parsed.get(signer)
        if key is None and signer in self._publics:
            try:
                key = Ed25519PublicKey.from_public_bytes(self._publics[signer])
            except (TypeError, ValueError):
                raise ProtocolError(f"party {self.name!r}: the identity key listed for "
                                    f"{signer!r} is not an Ed25519 public key",
                                    party=self.name, step=purpose) from None
            self._parsed[signer] = key
        if key is None:
            raise ProtocolError(f"party {self.name!r} has no identity key for {signer!r} "
                                f"(checking a {purpose!r} signature)", party=self.name,
                                step=purpose)
        if not isinstance(signature, bytes) or len(signature) != SIGNATURE_BYTES:
            raise ProtocolError(f"party {self.name!r} got a malformed {purpose!r} signature "
                                f"of {signer!r}", party=self.name, step=purpose)
        try:
            key.verify(signature, _signed(purpose, message))
        except InvalidSignature:
            raise ProtocolError(
                f"party {self.name!r}: the {purpose!r} signature of {signer!r} does not "
                "verify (a forged or altered message)", party=self.name,
                step=purpose) from None

    def __repr__(self) -> str:
        return f"Identity({self.name!r}, knows={sorted(self._publics)})"


def make_identities(names: list[str] | tuple[str, ...]) -> dict[str, Identity]:
    """Make a fresh identity per party, each knowing everyone's public key."""
    keys = {n: Ed25519PrivateKey.generate() for n in names}
    publics = MappingProxyType({n: k.public_key().public_bytes_raw() for n, k in keys.items()})
    return {n: Identity(n, k, publics) for n, k in keys.items()}
