"""Homomorphic aggregation: CKKS (APFL's protection) and packed Paillier (its baseline).

The clients share one key pair that the server never sees, dealt by the first client
(:mod:`islands.hfl.keys`); the server holds only the public part and combines the
uploads on ciphertexts; the clients decrypt the result they receive in the next task.

* :class:`CKKSAggregator` (APFL §3.2): each client uploads Enc(w_k), packed N/2 values
  per ciphertext (:mod:`islands.crypto.ckks`); the server computes Σ p_k·Enc(w_k) with
  plaintext-scalar products over the round's participants and sends it back with the
  scale 1/Σ_S p_k of the survivors S, which the clients apply after decrypting.
* :class:`PaillierAggregator` (the paper's comparison baseline): each client uploads
  Enc(pack(p_k·w_k)), many fixed-point values per plaintext
  (:mod:`islands.crypto.paillier`); the server multiplies the ciphertexts (adding the
  plaintexts); clients decrypt with CRT and unpack knowing how many terms were summed.
  The r^n factors are precomputed by each client in a background thread while it
  trains (never reused).

Neither can recover a round's aggregate without the secret key, so the server never
holds the plain model (:meth:`reveal` is None), and the run cannot resume from a server
checkpoint after a restart (the keys are not checkpointed). The shared key is the
scheme's weakness: any client with the server decrypts every other client's upload
(:func:`islands.hfl.audit.shared_key_attack`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.errors import ProtocolError, ValidationError
from islands.hfl.aggregate import (
    AggStep,
    MalformedUpdateError,
    PlainServerHalf,
    ServerLink,
    StreamingRound,
    unexpected_step,
)
from islands.hfl.keys import KeyReceiver, deal_key
from islands.runtime import Party
from islands.validation import check_int

__all__ = ["CKKSAggregator", "PaillierAggregator"]

Vector = NDArray[np.float32]


def _opened(payload: Any, keys: tuple[str, ...], who: str) -> dict[str, Any]:
    if not isinstance(payload, dict) or not all(k in payload for k in keys):
        raise ValidationError(f"the {who} global model is malformed (expected {keys})")
    return payload


# --------------------------------------------------------------------------- Paillier
def _int_bytes(v: int) -> bytes:
    raw = int(v).to_bytes((int(v).bit_length() + 7) // 8, "big")
    return len(raw).to_bytes(4, "big") + raw


class PaillierAggregator:
    """Packed Paillier aggregation under a key shared by the clients.

    Parameters
    ----------
    key_bits : int, default=2048
        Size of n.
    frac_bits, int_bits : int, default=32, 8
        Fixed point: resolution 2^-frac_bits, |p·w| < 2^int_bits.
    max_clients : int, default=1024
        Headroom of each slot for the sum over the clients.
    packed : bool, default=True
        Many values per plaintext; False puts one per ciphertext (the paper's baseline,
        for comparisons only: 40× more ciphertexts at 2048 bits).
    """

    name = "paillier"

    def __init__(self, key_bits: int = 2048, frac_bits: int = 32, int_bits: int = 8,
                 max_clients: int = 1024, packed: bool = True) -> None:
        from islands.crypto import paillier

        self.key_bits = check_int(key_bits, "key_bits", "PaillierAggregator", low=1024)
        # validates every number now, before any message leaves a party
        self.spec = paillier.packing_spec(
            self.key_bits, frac_bits=frac_bits, int_bits=int_bits, max_terms=max_clients,
            slots=None if packed else 1)
        self.packed = bool(packed)

    def client_half(self) -> _PaillierClient:
        """Make a client half (holds the shared private key once dealt)."""
        return _PaillierClient(self)

    def server_half(self) -> _PaillierServer:
        """Make the server half (public key only)."""
        return _PaillierServer(self)

    def __repr__(self) -> str:
        return f"PaillierAggregator(key_bits={self.key_bits}, packed={self.packed})"


def _paillier_fingerprint(public: bytes) -> bytes:
    from islands.crypto import paillier

    return paillier.fingerprint(paillier.public_key_from_bytes(public))


class _PaillierClient:
    def __init__(self, config: PaillierAggregator) -> None:
        self.config = config
        self.public_key: Any = None
        self.private_key: Any = None
        self.pool: Any = None
        self.keys = KeyReceiver("paillier", self._generate, self._install)

    def _generate(self) -> tuple[bytes, bytes]:
        from islands.crypto import paillier

        pk, sk = paillier.generate_keypair(self.config.key_bits)
        return _int_bytes(sk.p) + _int_bytes(sk.q), paillier.public_key_to_bytes(pk)

    def _install(self, secret: bytes) -> bytes:
        from phe import paillier as phe_paillier

        from islands.crypto import paillier

        k = int.from_bytes(secret[:4], "big")
        p = int.from_bytes(secret[4:4 + k], "big")
        q = int.from_bytes(secret[8 + k:], "big")
        pk = phe_paillier.PaillierPublicKey(p * q)
        self.public_key, self.private_key = pk, phe_paillier.PaillierPrivateKey(pk, p, q)
        return paillier.fingerprint(pk)

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        if self.keys.handles(step):
            return self.keys.on_step(party, step)
        raise unexpected_step(party, step, "Paillier")

    def open(self, payload: Any) -> Vector:
        from islands.crypto import paillier

        p = _opened(payload, ("blob", "terms", "scale", "length"), "Paillier")
        values = paillier.decrypt_vector(self.private_key, p["blob"], int(p["length"]),
                                         self.config.spec, terms=int(p["terms"]))
        return (values * float(p["scale"])).astype(np.float32)

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> bytes:
        from islands.crypto import paillier

        if self.public_key is None:
            raise ProtocolError(f"client {party.name!r} has no Paillier key", party=party.name,
                                step="update")
        scaled = float(weight) * np.asarray(params, dtype=np.float64)
        if self.pool is None:
            # precompute the next rounds' r^n on the other core while this client trains
            self.pool = paillier.RandomnessPool(
                self.public_key, self.config.spec.ciphertexts_for(scaled.size),
                background=True, private_key=self.private_key)
        try:
            return paillier.encrypt_vector(self.public_key, scaled, self.config.spec,
                                           pool=self.pool)
        except ValidationError as exc:
            raise ValidationError(f"Paillier: client {party.name!r}'s update: {exc}") from exc


class _PaillierServer(PlainServerHalf):
    def __init__(self, config: PaillierAggregator) -> None:
        self.config = config
        self.public_key: Any = None

    def setup(self, link: ServerLink, clients: Sequence[str]) -> list[str]:
        from islands.crypto import paillier

        public, dealt = deal_key(link, clients, "paillier", _paillier_fingerprint)
        self.public_key = paillier.public_key_from_bytes(public)
        return dealt

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> _PaillierRound:
        from islands.crypto import paillier

        # encrypt_vector's layout: the key's fingerprint, then ciphertexts of
        # 2·ceil(bits(n)/8) bytes, as many as the packing takes for dim values
        width = 2 * -(-int(self.public_key.n).bit_length() // 8)
        size = paillier.FINGERPRINT_BYTES + self.config.spec.ciphertexts_for(dim) * width
        return _PaillierRound(link.name, clients, weights, dim, self.public_key, size)

    def reveal(self, payload: Any) -> None:
        return None


class _PaillierRound(StreamingRound):
    def __init__(self, server: str, clients: Sequence[str], weights: Mapping[str, float],
                 dim: int, public_key: Any, size: int) -> None:
        super().__init__(server, clients, weights)
        self.dim, self.public_key, self.size = dim, public_key, size
        self.total: bytes | None = None

    def add(self, client: str, payload: Any) -> None:
        from islands.crypto import paillier

        self.expect(client)
        if not isinstance(payload, bytes) or len(payload) != self.size:
            got = (f"{len(payload)} bytes" if isinstance(payload, bytes)
                   else type(payload).__name__)
            raise MalformedUpdateError(
                f"client {client!r} sent a malformed Paillier update: {got}, where "
                f"{self.dim} values under this key take {self.size} bytes",
                party=self.server, client=client)
        try:
            blobs = [payload] if self.total is None else [self.total, payload]
            total = paillier.sum_encrypted(self.public_key, blobs)
        except ValidationError as exc:
            raise MalformedUpdateError(f"client {client!r}'s Paillier update: {exc}",
                                       party=self.server, client=client) from exc
        self.admit(client)
        self.total = total

    def finish(self, survivors: Sequence[str]) -> dict[str, Any]:
        weight = self.check_survivors(survivors)
        return {"blob": self.total, "terms": len(self.added), "scale": 1.0 / weight,
                "length": self.dim}


# --------------------------------------------------------------------------- CKKS
class CKKSAggregator:
    """CKKS aggregation (TenSEAL) under a key shared by the clients, as APFL.

    Parameters
    ----------
    poly_modulus_degree, coeff_mod_bit_sizes, scale_bits
        CKKS parameters (:class:`islands.crypto.ckks.CKKSParams`; the defaults keep the
        error on model weights below 1e-6 at 128-bit security).
    """

    name = "ckks"

    def __init__(self, poly_modulus_degree: int | None = None,
                 coeff_mod_bit_sizes: Sequence[int] | None = None,
                 scale_bits: int | None = None) -> None:
        from islands.crypto.ckks import CKKSParams

        defaults = CKKSParams()
        self.params = CKKSParams(
            poly_modulus_degree=(defaults.poly_modulus_degree if poly_modulus_degree is None
                                 else poly_modulus_degree),
            coeff_mod_bit_sizes=(defaults.coeff_mod_bit_sizes if coeff_mod_bit_sizes is None
                                 else tuple(coeff_mod_bit_sizes)),
            scale_bits=defaults.scale_bits if scale_bits is None else scale_bits)

    def client_half(self) -> _CKKSClient:
        """Make a client half (holds the shared secret context once dealt)."""
        return _CKKSClient(self)

    def server_half(self) -> _CKKSServer:
        """Make the server half (public context only)."""
        return _CKKSServer()

    def __repr__(self) -> str:
        return f"CKKSAggregator({self.params!r})"


def _ckks_fingerprint(public: bytes) -> bytes:
    from islands.crypto import ckks

    return ckks.fingerprint(ckks.load_context(public, secret=False))


class _CKKSClient:
    def __init__(self, config: CKKSAggregator) -> None:
        self.config = config
        self.context: Any = None
        self.keys = KeyReceiver("ckks", self._generate, self._install)

    def _generate(self) -> tuple[bytes, bytes]:
        from islands.crypto import ckks

        ctx = ckks.make_context(self.config.params)
        return ckks.secret_context_bytes(ctx), ckks.public_context_bytes(ctx)

    def _install(self, secret: bytes) -> bytes:
        from islands.crypto import ckks

        self.context = ckks.load_context(secret, secret=True)
        return ckks.fingerprint(self.context)

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        if self.keys.handles(step):
            return self.keys.on_step(party, step)
        raise unexpected_step(party, step, "CKKS")

    def open(self, payload: Any) -> Vector:
        from islands.crypto import ckks

        p = _opened(payload, ("chunks", "scale", "length"), "CKKS")
        values = ckks.decrypt_vector(self.context, p["chunks"], int(p["length"]))
        return (values * float(p["scale"])).astype(np.float32)

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> Any:
        from islands.crypto import ckks

        if self.context is None:
            raise ProtocolError(f"client {party.name!r} has no CKKS key", party=party.name,
                                step="update")
        return ckks.encrypt_vector(self.context, np.asarray(params, dtype=np.float64))


class _CKKSServer(PlainServerHalf):
    def __init__(self) -> None:
        self.context: Any = None

    def setup(self, link: ServerLink, clients: Sequence[str]) -> list[str]:
        from islands.crypto import ckks

        public, dealt = deal_key(link, clients, "ckks", _ckks_fingerprint)
        self.context = ckks.load_context(public, secret=False)
        return dealt

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> _CKKSRound:
        return _CKKSRound(link.name, clients, weights, dim, self.context)

    def reveal(self, payload: Any) -> None:
        return None


class _CKKSRound(StreamingRound):
    def __init__(self, server: str, clients: Sequence[str], weights: Mapping[str, float],
                 dim: int, context: Any) -> None:
        from islands.crypto import ckks

        super().__init__(server, clients, weights)
        self.dim = dim
        self.sum = ckks.EncryptedSum(context, dim)

    def add(self, client: str, payload: Any) -> None:
        weight = self.expect(client)
        try:  # the sum is left untouched by a rejected upload
            self.sum.add(payload, weight)
        except ValidationError as exc:
            raise MalformedUpdateError(f"client {client!r}'s CKKS update: {exc}",
                                       party=self.server, client=client) from exc
        self.admit(client)

    def finish(self, survivors: Sequence[str]) -> dict[str, Any]:
        weight = self.check_survivors(survivors)
        return {"chunks": self.sum.result(), "scale": 1.0 / weight, "length": self.dim}
