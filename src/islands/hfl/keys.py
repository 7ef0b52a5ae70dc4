"""Dealing one secret key to every client, through a server that must never see it.

APFL's protection (CKKS over a chaos permutation) and the Paillier baseline need one
key that all clients share and the server does not have (ALGORITHMS.md §3). The first
client in the federation's order is the *dealer*: it generates the key and sends it to
every other client sealed under a pairwise X25519 agreement
(:mod:`islands.crypto.envelope`), relayed by the server, which forwards envelopes it
cannot open. Three phases, run once per run before the first round (round 0):

=================  ===========================================================
phase              what happens
=================  ===========================================================
``<p>-hello``      server → clients: the dealer's name, a session id; each
                   client answers with a fresh X25519 public key
``<p>-deal``       server → dealer: everyone's public key; the dealer answers
                   with the public part (what the server may hold: a CKKS
                   context without its secret key, a Paillier modulus) and one
                   envelope per client
``<p>-deliver``    server → each other client: the dealer's public key and its
                   envelope; the client opens it, installs the key and answers
                   with a fingerprint the server checks against the public part
=================  ===========================================================

``<p>`` is the scheme's purpose (``ckks``, ``paillier``, ``chaos``), so several keys can
be dealt in one run. A client that fails to answer is left out of the run; a dealer
that fails ends it with an error naming it.

Weakness, as the paper's scheme has it: every client holds the same secret key, so a
client colluding with the server decrypts every other client's upload
(:mod:`islands.hfl.audit` demonstrates it). Secure aggregation avoids this.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

from islands.crypto.envelope import open_sealed, pair_context, seal
from islands.crypto.masking import MaskingKey, generate_key
from islands.errors import ProtocolError
from islands.hfl.aggregate import AggStep, ServerLink
from islands.runtime import Party

__all__ = ["KeyReceiver", "deal_key"]

_ENVELOPE = b"islands key dealing v1"


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
        c: {"dealer": dealer, "session": session} for c in clients})
    if dealer not in hello:
        raise ProtocolError(
            f"the {purpose} key dealer {dealer!r} did not answer; no key can be dealt",
            party=link.name, step=f"{purpose}-hello")
    keys = {c: hello[c] for c in clients if isinstance(hello.get(c), bytes)}
    dealt = link.exchange(0, f"{purpose}-deal", {dealer: {"keys": keys}})
    if dealer not in dealt:
        raise ProtocolError(f"the {purpose} key dealer {dealer!r} failed while dealing",
                            party=link.name, step=f"{purpose}-deal")
    answer = dealt[dealer]
    if (not isinstance(answer, dict) or not isinstance(answer.get("public"), bytes)
            or not isinstance(answer.get("sealed"), dict)):
        raise ProtocolError(f"the {purpose} key dealer sent a malformed answer",
                            party=link.name, step=f"{purpose}-deal")
    public: bytes = answer["public"]
    want = fingerprint(public)
    others = [c for c in keys if c != dealer and c in answer["sealed"]]
    acks = link.exchange(0, f"{purpose}-deliver", {
        c: {"dealer_key": keys[dealer], "sealed": answer["sealed"][c]} for c in others})
    installed = [dealer]
    for c in others:
        if c not in acks:
            continue
        if acks[c] != (want if want is not None else b"ok"):
            raise ProtocolError(
                f"client {c!r} installed a different {purpose} key than the dealer's",
                party=link.name, step=f"{purpose}-deliver")
        installed.append(c)
    return public, installed


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

    def on_step(self, party: Party, step: AggStep) -> Any:
        """Handle one phase; return the reply."""
        phase = step.phase[len(self.purpose) + 1:]
        body = step.body if isinstance(step.body, dict) else {}
        if phase == "hello":
            if not isinstance(body.get("session"), bytes) or not isinstance(
                    body.get("dealer"), str):
                raise ProtocolError(f"malformed {step.phase} message", party=party.name,
                                    step=step.phase)
            self._own, self._session, self._dealer = generate_key(), body["session"], body[
                "dealer"]
            return self._own.public
        if self._own is None:
            raise ProtocolError(f"client {party.name!r} got {step.phase!r} before hello",
                                party=party.name, step=step.phase)
        if phase == "deal":
            if self._dealer != party.name or not isinstance(body.get("keys"), dict):
                raise ProtocolError(f"client {party.name!r} was asked to deal the "
                                    f"{self.purpose} key but is not the dealer",
                                    party=party.name, step=step.phase)
            secret, public = self._generate()
            self._install(secret)
            envelopes: dict[str, bytes] = {}
            for c, pub in body["keys"].items():
                if c == party.name:
                    continue
                envelopes[c] = seal(self._own, pub, secret,
                                 context=pair_context(_ENVELOPE, self._session, party.name, c),
                                 aad=_aad(self.purpose, self._session, c))
            self.ready = True
            return {"public": public, "sealed": envelopes}
        if phase == "deliver":
            dealer_key, sealed = body.get("dealer_key"), body.get("sealed")
            if not isinstance(dealer_key, bytes) or not isinstance(sealed, bytes):
                raise ProtocolError(f"malformed {step.phase} message", party=party.name,
                                    step=step.phase)
            secret = open_sealed(self._own, dealer_key, sealed,
                                 context=pair_context(_ENVELOPE, self._session, self._dealer,
                                                      party.name),
                                 aad=_aad(self.purpose, self._session, party.name),
                                 sender=f"dealer {self._dealer!r}")
            fp = self._install(secret)
            self.ready = True
            return fp if fp is not None else b"ok"
        raise ProtocolError(f"unknown key-dealing phase {step.phase!r}", party=party.name,
                            step=step.phase)
