"""Pairwise authenticated encryption between two parties, through an untrusted relay.

Secure aggregation (Bonawitz et al. [1]_, §4) routes every client-to-client message
through the server: Shamir shares of a client's keys go to each other client encrypted
so that the server, which forwards them, cannot read them. Key dealing for CKKS and
Paillier (a secret key every client shares and the server must never see) works the
same way. Both ends derive a symmetric key from an X25519 agreement, and the message is
sealed with AES-256-GCM [2]_:

* key = HKDF-SHA256(X25519(own, peer), info = b"islands pairwise v1" + context), via
  :func:`islands.crypto.masking.pair_seed`, where ``context`` binds a purpose label, the
  session and the two names (sorted, length-prefixed), so the same key pair used for
  masks and for envelopes gives unrelated keys;
* nonce: 12 random bytes from the operating system's CSPRNG, sent in front of the
  ciphertext; associated data: the caller's ``aad`` (round, sender, receiver), so a
  relay cannot replay an envelope in another round or to another receiver.

What the relay can still do: drop or delay envelopes (the protocols count them), and,
as an *active* adversary, substitute public keys when it forwards them. The protocols
here assume an honest-but-curious server (the semi-honest model of [1]_ §5); against
key substitution, public keys must be authenticated (signed, or sent over the mutually
authenticated channels of a deployment).

Why hand-written: the primitives (X25519, HKDF, AES-GCM) are ``cryptography``'s; this
module only fixes the key schedule and the framing.

References
----------
.. [1] K. Bonawitz et al. "Practical Secure Aggregation for Privacy-Preserving Machine
   Learning." ACM CCS 2017.
.. [2] NIST SP 800-38D, Galois/Counter Mode (GCM), 2007.
"""

from __future__ import annotations

import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from islands.crypto.masking import MaskingKey, pair_seed
from islands.errors import ValidationError

__all__ = ["NONCE_BYTES", "envelope_key", "open_sealed", "open_with", "pair_context", "seal",
           "seal_with"]

NONCE_BYTES = 12
_TAG_BYTES = 16


def pair_context(purpose: bytes, session: bytes, a: str, b: str) -> bytes:
    """Bytes binding a purpose, a session and the unordered pair {a, b} (injective)."""
    low, high = sorted((a, b))
    parts = [purpose, session, low.encode("utf-8"), high.encode("utf-8")]
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def seal(own: MaskingKey, peer_public: bytes, plaintext: bytes, *, context: bytes,
         aad: bytes) -> bytes:
    """Encrypt and authenticate ``plaintext`` for the holder of ``peer_public``.

    Parameters
    ----------
    own
        The sender's X25519 key pair.
    peer_public
        The receiver's raw public key.
    plaintext
        The message.
    context
        Binds the derived key (see :func:`pair_context`); the receiver passes the same.
    aad
        Authenticated, unencrypted data the receiver must pass identically.

    Returns
    -------
    bytes
        nonce (12 bytes) ‖ AES-256-GCM ciphertext ‖ tag (16 bytes).
    """
    return seal_with(envelope_key(own, peer_public, context=context), plaintext, aad=aad)


def envelope_key(own: MaskingKey, peer_public: bytes, *, context: bytes) -> bytes:
    """Return the AES-256-GCM key :func:`seal` and :func:`open_sealed` derive for a pair.

    The key is the same at both ends and in both directions (``context`` names the pair
    unordered), so a party that seals for a peer and later opens what the peer sealed
    for it derives it once: one X25519 agreement instead of two.
    """
    return pair_seed(own, peer_public, context=context)


def seal_with(key: bytes, plaintext: bytes, *, aad: bytes) -> bytes:
    """Seal under a key from :func:`envelope_key`; a fresh random nonce every call."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(own: MaskingKey, peer_public: bytes, sealed: bytes, *, context: bytes,
                aad: bytes, sender: str = "the sender") -> bytes:
    """Decrypt what :func:`seal` made; raise ValidationError if it was tampered with.

    ``sender`` only names the other party in the error message.
    """
    return open_with(envelope_key(own, peer_public, context=context), sealed, aad=aad,
                     sender=sender)


def open_with(key: bytes, sealed: bytes, *, aad: bytes, sender: str = "the sender") -> bytes:
    """Open what :func:`seal_with` (or :func:`seal`) made under ``key``; as :func:`open_sealed`."""
    if not isinstance(sealed, bytes) or len(sealed) < NONCE_BYTES + _TAG_BYTES:
        raise ValidationError(f"the sealed message from {sender} is malformed")
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad)
    except InvalidTag as exc:
        raise ValidationError(
            f"the sealed message from {sender} does not authenticate (tampered with, "
            "replayed from another round, or sealed under another key)") from exc
