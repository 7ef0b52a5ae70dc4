"""Dealing one secret key to every client, through a server that must never see it.

APFL's protection (CKKS over a chaos permutation) and the Paillier baseline need one
key that all clients share and the server does not have (ALGORITHMS.md §3). The first
client in the server's order is the *dealer*: it generates the key and sends it to
every other client sealed under a pairwise X25519 agreement
(:mod:`islands.crypto.envelope`), relayed by the server, which forwards envelopes it
cannot open. Three phases, run once per run before the first round (round 0):

=================  ===========================================================
phase              what happens
=================  ===========================================================
``<p>-hello``      server → clients: the dealer's name, a session id; each
                   client answers with a fresh X25519 public key, signed with
                   its identity
``<p>-deal``       server → dealer: everyone's signed public key; the dealer
                   checks each signature and that each name is a client of the
                   federation, and answers with the public part (what the
                   server may hold: a CKKS context without its secret key, a
                   Paillier modulus), one envelope per client and its own
                   envelope key, signed
``<p>-deliver``    server → each other client: the dealer's signed public key
                   and its envelope; the client checks the dealer's signature,
                   opens the envelope, checks and installs the key and answers
                   with a fingerprint the server checks against the public part
=================  ===========================================================

``<p>`` is the scheme's purpose (``ckks``, ``paillier``, ``chaos``), so several keys can
be dealt in one run. A client that fails to answer is left out of the run; a dealer
that fails ends it with an error naming it.

Against a deviating server: the signatures (:mod:`islands.runtime.identity`, bound to
each party's certificate in a deployment) mean a server that makes up its own key and
seals it for the clients, or that lists itself or a stranger among the clients, is
refused: a client accepts a key only from a client of its own federation, and the
dealer seals only for them. The server may pick which client deals; any client could
collude with the server anyway (below).

Weakness, as the paper's scheme has it: every client holds the same secret key, so a
client colluding with the server decrypts every other client's upload
(:mod:`islands.hfl.audit` demonstrates it). Secure aggregation avoids this.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from islands.aggregation.base import AggStep, ServerLink
from islands.crypto.envelope import open_sealed, pair_context, seal
from islands.crypto.masking import MaskingKey, generate_key
from islands.errors import ProtocolError
from islands.runtime import Party, wire

__all__ = [
    "KeyAck",
    "KeyDeal",
    "KeyDealRequest",
    "KeyDelivery",
    "KeyHello",
    "KeyOffer",
    "KeyReceiver",
    "deal_key",
]

_ENVELOPE = b"islands key dealing v1"


# --------------------------------------------------------------------------- messages
# The bodies of the phases (AggStep/AggReply.body); the codec checks their field types
# on decode, the receiver checks the class for the phase and the values.
@wire.register(name="hfl.KeyHello")
@dataclass(frozen=True)
class KeyHello:
    """``<p>-hello``, server → client: the dealer's name and the session id."""

    dealer: str
    session: bytes


@wire.register(name="hfl.KeyOffer")
@dataclass(frozen=True)
class KeyOffer:
    """``<p>-hello``, client → server: a fresh envelope public key, signed."""

    key: bytes
    sig: bytes


@wire.register(name="hfl.KeyDealRequest")
@dataclass(frozen=True)
class KeyDealRequest:
    """``<p>-deal``, server → dealer: every client's signed envelope key, by name."""

    keys: dict[str, KeyOffer]


@wire.register(name="hfl.KeyDeal")
@dataclass(frozen=True)
class KeyDeal:
    """``<p>-deal``, dealer → server: the public part, one envelope per client, signed."""

    public: bytes
    sealed: dict[str, bytes]
    sig: bytes


@wire.register(name="hfl.KeyDelivery")
@dataclass(frozen=True)
class KeyDelivery:
    """``<p>-deliver``, server → client: the dealer's signed envelope key, its envelope."""

    dealer_key: bytes
    dealer_sig: bytes
    sealed: bytes


@wire.register(name="hfl.KeyAck")
@dataclass(frozen=True)
class KeyAck:
    """``<p>-deliver``, client → server: the installed key's fingerprint (or ``b"ok"``)."""

    fingerprint: bytes


def _aad(purpose: str, session: bytes, receiver: str) -> bytes:
    return purpose.encode() + b"\x00" + session + receiver.encode("utf-8")


def deal_key(link: ServerLink, clients: Sequence[str], purpose: str,
             fingerprint: Callable[[bytes], bytes | None]) -> tuple[bytes, list[str]]:
    """Server side: have the first client deal a key to the others.

    Parameters
    ----------
    link
        The server's link to the clients.
    clients
        The clients, dealer first.
    purpose
        The scheme's name (prefix of the phases).
    fingerprint
        Maps the public part to the fingerprint each client must report (None: the
        scheme has no public part, the clients only acknowledge).

    Returns
    -------
    public, clients
        The public part and the clients that installed the key (dealer first).
    """
    dealer = clients[0]
    session = secrets.token_bytes(16)
    hello = link.exchange(0, f"{purpose}-hello", {
        c: KeyHello(dealer=dealer, session=session) for c in clients})
    if dealer not in hello:
        raise ProtocolError(
            f"the {purpose} key dealer {dealer!r} did not answer; no key can be dealt",
            party=link.name, step=f"{purpose}-hello")
    keys = {c: hello[c] for c in clients if isinstance(hello.get(c), KeyOffer)}
    dealt = link.exchange(0, f"{purpose}-deal", {dealer: KeyDealRequest(keys=keys)})
    if dealer not in dealt:
        raise ProtocolError(f"the {purpose} key dealer {dealer!r} failed while dealing",
                            party=link.name, step=f"{purpose}-deal")
    answer = dealt[dealer]
    if (not isinstance(answer, KeyDeal) or not isinstance(answer.public, bytes)
            or not isinstance(answer.sealed, dict) or not isinstance(answer.sig, bytes)):
        raise ProtocolError(f"the {purpose} key dealer sent a malformed answer",
                            party=link.name, step=f"{purpose}-deal")
    public: bytes = answer.public
    want = fingerprint(public)
    others = [c for c in keys if c != dealer and c in answer.sealed]
    acks = link.exchange(0, f"{purpose}-deliver", {
        c: KeyDelivery(dealer_key=keys[dealer].key, dealer_sig=answer.sig,
                       sealed=answer.sealed[c]) for c in others})
    installed = [dealer]
    for c in others:
        if c not in acks:
            continue
        ack = acks[c]
        if not isinstance(ack, KeyAck) or ack.fingerprint != (
                want if want is not None else b"ok"):
            raise ProtocolError(
                f"client {c!r} installed a different {purpose} key than the dealer's",
                party=link.name, step=f"{purpose}-deliver")
        installed.append(c)
    return public, installed


def _key_message(purpose: str, session: bytes, owner: str, key: bytes) -> bytes:
    return _aad(purpose, session, owner) + b"\x00" + key


class KeyReceiver:
    """Client side of :func:`deal_key` for one purpose.

    Parameters
    ----------
    purpose
        The scheme's name.
    generate
        Dealer only: make a new key, returning (secret, public) bytes.
    install
        Install a secret received (or generated); returns the fingerprint to report,
        or None when the scheme has no public part.
    """

    def __init__(self, purpose: str, generate: Callable[[], tuple[bytes, bytes]],
                 install: Callable[[bytes], bytes | None]) -> None:
        self.purpose = purpose
        self._generate = generate
        self._install = install
        self._own: MaskingKey | None = None
        self._session = b""
        self._dealer = ""
        self.ready = False

    def handles(self, step: AggStep) -> bool:
        """Whether ``step`` is one of this receiver's phases."""
        return step.round == 0 and step.phase.startswith(self.purpose + "-")

    def _refuse(self, party: Party, server: str, phase: str, what: str) -> ProtocolError:
        return ProtocolError(f"client {party.name!r} refuses {server!r}'s {phase!r} "
                             f"message: {what}", party=party.name, step=phase)

    def on_step(self, party: Party, step: AggStep, *, server: str) -> Any:
        """Handle one phase relayed by ``server``; return the reply."""
        phase = step.phase[len(self.purpose) + 1:]
        body = step.body
        clients = set(party.parties) - {server}
        if phase == "hello":
            if not isinstance(body, KeyHello) or not isinstance(body.session, bytes) or (
                    not isinstance(body.dealer, str)):
                raise ProtocolError(f"malformed {step.phase} message", party=party.name,
                                    step=step.phase)
            if body.dealer not in clients:
                raise self._refuse(party, server, step.phase,
                                   f"the dealer {body.dealer[:100]!r} is not a client of "
                                   "this federation")
            self._own, self._session, self._dealer = generate_key(), body.session, body.dealer
            sig = party.identity.sign(f"{self.purpose} key", _key_message(
                self.purpose, self._session, party.name, self._own.public))
            return KeyOffer(key=self._own.public, sig=sig)
        if self._own is None:
            raise ProtocolError(f"client {party.name!r} got {step.phase!r} before hello",
                                party=party.name, step=step.phase)
        if phase == "deal":
            return self._deal(party, server, step, body, clients)
        if phase == "deliver":
            if not isinstance(body, KeyDelivery) or not isinstance(
                    body.dealer_key, bytes) or not isinstance(body.sealed, bytes):
                raise ProtocolError(f"malformed {step.phase} message", party=party.name,
                                    step=step.phase)
            dealer_key, sealed = body.dealer_key, body.sealed
            # the envelope key must be the dealer's own: a server that seals its own key
            # for the clients has no dealer signature on its envelope key
            party.identity.verify(self._dealer, f"{self.purpose} dealer", _key_message(
                self.purpose, self._session, self._dealer, dealer_key), body.dealer_sig)
            secret = open_sealed(self._own, dealer_key, sealed,
                                 context=pair_context(_ENVELOPE, self._session, self._dealer,
                                                      party.name),
                                 aad=_aad(self.purpose, self._session, party.name),
                                 sender=f"dealer {self._dealer!r}")
            fp = self._install(secret)
            self.ready = True
            return KeyAck(fingerprint=fp if fp is not None else b"ok")
        raise ProtocolError(f"unknown key-dealing phase {step.phase!r}", party=party.name,
                            step=step.phase)

    def _deal(self, party: Party, server: str, step: AggStep, body: Any,
              clients: set[str]) -> KeyDeal:
        assert self._own is not None
        if self._dealer != party.name or not isinstance(body, KeyDealRequest) or (
                not isinstance(body.keys, dict)):
            raise ProtocolError(f"client {party.name!r} was asked to deal the "
                                f"{self.purpose} key but is not the dealer",
                                party=party.name, step=step.phase)
        keys: dict[str, Any] = body.keys
        strangers = sorted(str(c)[:100] for c in keys if c not in clients)
        if strangers:
            raise self._refuse(party, server, step.phase,
                               f"{strangers} are not clients of this federation; the "
                               f"{self.purpose} key is sealed only for its clients")
        for c, entry in keys.items():
            if c == party.name:
                continue
            if not isinstance(entry, KeyOffer) or not isinstance(entry.key, bytes):
                raise ProtocolError(f"malformed {step.phase} message", party=party.name,
                                    step=step.phase)
            party.identity.verify(c, f"{self.purpose} key", _key_message(
                self.purpose, self._session, c, entry.key), entry.sig)
        secret, public = self._generate()
        self._install(secret)
        envelopes: dict[str, bytes] = {}
        for c, entry in keys.items():
            if c == party.name:
                continue
            envelopes[c] = seal(self._own, entry.key, secret,
                                context=pair_context(_ENVELOPE, self._session, party.name, c),
                                aad=_aad(self.purpose, self._session, c))
        self.ready = True
        sig = party.identity.sign(f"{self.purpose} dealer", _key_message(
            self.purpose, self._session, party.name, self._own.public))
        return KeyDeal(public=public, sealed=envelopes, sig=sig)
