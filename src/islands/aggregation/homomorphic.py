"""Homomorphic aggregation: CKKS (APFL's protection) and packed Paillier (its baseline).

The clients share one key pair that the server never sees, dealt by the first client
(:mod:`islands.aggregation.keys`); the server holds only the public part and combines the
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
  trains (never reused). With ``he="ou"`` the engine is HEU's Okamoto–Uchiyama
  (:mod:`islands.crypto.heu`): the same packed slots, fewer per ciphertext (OU's
  plaintexts are integers modulo its secret prime p, about key_bits/3 bits), every
  received key and ciphertext parsed by that module's checked parsers, and decryption
  only within the packing's range (OU's plaintext-overflow attack).

Neither can recover a round's aggregate without the secret key, so the server never
holds the plain model (:meth:`reveal` is None), and the run cannot resume from a server
checkpoint after a restart (the keys are not checkpointed). The shared key is the
scheme's weakness: any client with the server decrypts every other client's upload
(:func:`islands.hfl.audit.shared_key_attack`).

Against a deviating dealer or server (issue 22):

* **A client checks the key it installs against its own configuration** (the dealer's
  configuration, or a server relaying for a dealer, cannot lower it): a CKKS context
  needs at least the client's ring dimension N and scale, a data modulus that holds
  sums as large, and no more modulus bits per ring dimension (the ratio the lattice
  security estimate falls with); a Paillier modulus at least the client's ``key_bits``;
  under ``he="ou"`` a key of that scheme (a dealt key of the other scheme is refused,
  both ways), n of at least ``key_bits`` bits, plaintexts that hold the packing, and a
  secret key that fits the public one. More protection or precision is accepted. A
  mismatch is a ProtocolError naming the dealer, the parameter, the value expected and
  the value received, raised when the key arrives, before anything is encrypted or sent.
* **An aggregate is bound to its values, its round and its contributors**
  (:mod:`islands.crypto.mac`). Every upload carries a linear MAC of its values under a
  key derived from the dealt secret, which the server never holds: under Paillier and OU
  one more ciphertext holding a polynomial MAC of the packed plaintexts modulo the
  plaintext modulus (exact), under CKKS 16 tags per block of 1,024 values (checked to a
  tolerance of 2^-(scale_bits−16) on the scale of the model the client uses, 6·10^-8 at
  the defaults, far above CKKS's own error and far below any useful change). The MAC
  key's point and pads are fresh every round and model length, and each pad is scaled by
  (Paillier, OU) or divided by (CKKS, whose server applies the weights) the weight the
  client was given, so a contributor claimed with another weight, or left out, is
  caught; a CKKS weight below 2^-16 is refused. A client uploads once per round and
  never for a round whose aggregate it opened (two uploads under one round's pads could
  be mixed). The server sends the aggregate with the round, the contributors S and their
  weights (and, under OU, each upload's attempt counter); a client decrypts, checks that
  the MAC of what it decrypted is the MAC of the honest weighted sum of those uploads of
  that round, and only then scales the model by 1/Σ_S p_j and uses it (:meth:`open`; the
  model it trains on and evaluates comes from the same check). Anything else is refused
  with a ProtocolError naming the server and the round: one client's upload, a splice of
  several uploads' ciphertexts, a slot-wise masked or scaled combination, other weights,
  a relabelled or replayed round, a sum of fewer uploads than claimed. The chance that a
  forgery passes is below 2^-600 under Paillier and OU whatever the server computes from
  the ciphertexts and the public key, and under CKKS below (2τ·max(√1024, |x|)/δ)^16 for
  a forgery that moves a value of the model by δ, for values up to |x| (10^-20 for δ =
  10^-4 and |x| ≤ 32); :mod:`islands.crypto.mac` gives the arguments. An aggregate of a
  single upload other than the client's own is refused (it would be that client's
  model), and so is one of fewer uploads than the client's own ``min_clients``, or than
  the t its distributed DP noise is calibrated for.

Residual, honestly: the server still chooses which of the round's uploads it sums
(at least ``min_clients`` of them), and it sets the weights from the sample counts the
clients announce; a client checks its own weight and, through the MAC, that every
contributor's upload was made with the weight claimed for it. It may leave out uploads,
as it must for late clients; a sum over two clients shows each of them the other's model,
and a weight near 1 on one contributor makes the mean nearly its model. A client knows only
the weight it is given: a server that gives every contributor but one a tiny weight
before the round (Paillier, OU: down to 2^-1074; CKKS: 2^-16) makes ``min_clients`` count
names, not models, without DP. Under distributed DP it cannot: every aggregate claims the
t its uploads' noise was calibrated for (the MAC's pads are drawn for each contributor's
t, so the claim is bound), and every client, whether or not it took part in that round,
refuses one of fewer than t uploads or of unequal weights (client-level DP's server
weights every upload equally; the MAC binds each claimed weight to the one its
contributor was given). A client colluding with the server still decrypts
every upload (the shared key, above).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.aggregation.base import (
    AggStep,
    MalformedUpdateError,
    PlainServerHalf,
    ServerLink,
    StreamingRound,
    unexpected_step,
)
from islands.aggregation.config import CkksConfig, PaillierAggConfig
from islands.aggregation.keys import KeyHello, KeyReceiver, deal_key
from islands.crypto import ckks, mac
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party

__all__ = ["CKKSAggregator", "PaillierAggregator"]

Vector = NDArray[np.float32]


def _paillier() -> ModuleType:
    """Return :mod:`islands.crypto.paillier`, importing phe and gmpy2 on first use only."""
    from islands.crypto import paillier

    return paillier


def _heu() -> ModuleType:
    """Return :mod:`islands.crypto.heu`, importing gmpy2 and sf-heu on first use only."""
    from islands.crypto import heu

    return heu


def _refuse_key(scheme: str, me: str, dealer: str, name: str, want: str,
                got: Any, step: str | None = None) -> ProtocolError:
    return ProtocolError(
        f"client {me!r} refuses the {scheme} key of dealer {dealer!r}: parameter {name!r} "
        f"must be {want} (this client's own configuration), got {got}",
        party=me, step=step or f"{scheme}-deliver")


class _Binding:
    """A client's side of the aggregate binding (see the module docstring).

    Holds the MAC key (derived from the dealt secret), who this client is, and its last
    upload and opened round; :meth:`claims` checks what the server says an aggregate is,
    :meth:`check_real` and :meth:`check_modular` that its MAC is the one of that sum.
    """

    def __init__(self, scheme: str, min_clients: int = 1) -> None:
        self.scheme = scheme
        self.min_clients = int(min_clients)
        self.key: bytes | None = None
        self.me = ""
        self.server = ""
        self.dealer = ""
        self.clients: frozenset[str] = frozenset()  # the federation's clients
        self.uploaded = 0  # the last round this client uploaded in
        self.weight = 0.0  # its weight then
        self.opened = 0  # the latest round of an aggregate it accepted
        self.least: dict[int, int] = {}  # round -> fewest contributors its noise allows
        self.distributed = False  # under distributed DP noise: every aggregate claims its t

    def require(self, round: int, contributors: int) -> None:
        """Refuse an aggregate of ``round`` of fewer than ``contributors``, or unequal weights.

        Client-level DP with distributed noise calls it: each upload carries noise
        calibrated for that many survivors, so a sum of fewer carries less than the
        accountant charges; and its server weights every upload equally, so a claim of
        unequal weights (every contributor but one given a tiny weight) would be a sum of
        fewer in all but name.
        """
        self.least = {r: n for r, n in self.least.items() if r >= round - 1}
        self.least[round] = contributors
        self.distributed = True

    def guaranteed(self, round: int) -> int:
        """Return the t of ``round``'s noise, for the MAC's pads (0 without distributed DP)."""
        return self.least.get(round, 0) if self.distributed else 0

    def seen(self, party: Party, server: str, step: AggStep | None = None) -> None:
        self.me, self.server = party.name, server
        self.clients = frozenset(party.parties) - {server}
        if (step is not None and step.phase.endswith("-hello")
                and isinstance(step.body, KeyHello) and isinstance(step.body.dealer, str)):
            self.dealer = step.body.dealer[:100]

    def install(self, secret: bytes) -> None:
        self.key = mac.derive_key(secret, self.scheme)

    def mac_key(self) -> bytes:
        if self.key is None:
            raise ProtocolError(f"client {self.me!r} has no {self.scheme} key",
                                party=self.me, step="update")
        return self.key

    def begin_upload(self, round: int) -> None:
        """Refuse to upload ``round`` twice, or after opening an aggregate of ``round``.

        Two uploads of one round carry the same MAC pads, and any combination of the two
        whose coefficients sum to 1 would pass as this client's upload (3·U − 2·U'); an
        honest server asks each client once per round, for a round after the aggregate
        it sends with the task.
        """
        latest = max(self.uploaded, self.opened)
        if isinstance(round, bool) or not isinstance(round, int) or round <= latest:
            what = (f"it uploaded in round {self.uploaded}" if self.uploaded >= self.opened
                    else f"it opened the aggregate of round {self.opened}")
            raise ProtocolError(
                f"client {self.me!r} refuses to upload round {str(round)[:20]} for server "
                f"{self.server!r}: {what} (one upload per round, after the aggregate "
                "it starts from)", party=self.me, step="update")

    def upload(self, round: int, weight: float) -> None:
        """Record an upload of ``round`` with ``weight``."""
        self.uploaded, self.weight = max(self.uploaded, round), float(weight)

    def refuse(self, round: Any, why: str) -> ProtocolError:
        return ProtocolError(
            f"client {self.me!r} refuses the aggregate server {self.server!r} sent as that "
            f"of round {round}: {why}", party=self.me, step="task")

    def claims(self, p: Any, body: str, *, counters: bool = False
               ) -> tuple[int, list[str], NDArray[np.float64], int, list[int], int]:
        """Check the aggregate's claims before decrypting.

        Returns the round, the contributors, their weights, the model's length, (with
        ``counters``) each upload's MAC attempt counter, and under distributed DP the t
        the aggregate claims its uploads' noise was calibrated for (else 0). Under
        distributed DP every aggregate must claim a t, sum at least t uploads and weight
        them equally, whether or not this client took part in its round: the MAC binds the
        claimed t to the one each contributor's noise was calibrated for.
        """
        keys = (body, "round", "contributors", "weights", "length",
                *(("counters",) if counters else ()))
        if not isinstance(p, dict) or not all(k in p for k in keys):
            raise self.refuse("?", f"it is malformed (expected the fields {list(keys)})")
        rnd, names, weights, n = p["round"], p["contributors"], p["weights"], p["length"]
        if isinstance(rnd, bool) or not isinstance(rnd, int) or rnd < 1:
            raise self.refuse(str(rnd)[:20], "its round is not an int >= 1")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n < 2**32:
            raise self.refuse(rnd, "its length is not an int in [1, 2^32)")
        if (not isinstance(names, list) or not names
                or not all(isinstance(c, str) for c in names) or len(set(names)) != len(names)):
            raise self.refuse(rnd, "its contributors are not a list of distinct names")
        strangers = [c[:100] for c in names if self.clients and c not in self.clients][:5]
        if strangers:
            raise self.refuse(rnd, f"it claims contributors {strangers} that are not clients "
                              "of this federation")
        try:
            w = np.asarray(weights, dtype=np.float64)
        except (TypeError, ValueError):
            w = np.zeros(0)
        if w.shape != (len(names),) or not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise self.refuse(rnd, "its weights are not one finite weight > 0 per "
                               "contributor")
        if self.scheme == "ckks" and np.any(w < mac.MIN_WEIGHT):
            raise self.refuse(rnd, f"it claims a weight below {mac.MIN_WEIGHT:g}, which the "
                              "MAC cannot tell from a contributor left out")
        tries: list[int] = []
        if counters:
            tries = p["counters"]
            if (not isinstance(tries, list) or len(tries) != len(names) or not all(
                    isinstance(k, int) and not isinstance(k, bool) and 0 <= k < mac.MAX_COUNTER
                    for k in tries)):
                raise self.refuse(rnd, f"its counters are not one int in [0, "
                                  f"{mac.MAX_COUNTER}) per contributor")
        latest = max(self.uploaded, self.opened)
        if rnd < latest:
            after = (f"after its own upload of round {self.uploaded}"
                     if self.uploaded >= self.opened else
                     f"after it accepted the aggregate of round {self.opened}")
            raise self.refuse(rnd, f"it comes {after} (a replayed aggregate)")
        noise_for = 0
        if self.distributed:
            claimed = p.get("guaranteed")
            own = self.least.get(rnd)
            if (isinstance(claimed, bool) or not isinstance(claimed, int)
                    or not 1 <= claimed < 2**32):
                raise self.refuse(rnd, "it claims no t for its distributed DP noise (an int "
                                  ">= 1), which every aggregate under distributed noise must")
            noise_for = claimed
            if own is not None and noise_for != own:
                raise self.refuse(rnd, f"it claims t={noise_for}, where this client's "
                                  f"distributed DP noise of that round is calibrated for {own}")
            if len(names) < noise_for:
                raise self.refuse(rnd, f"it sums {len(names)} uploads, fewer than the "
                                  f"{noise_for} this client's distributed DP noise is "
                                  "calibrated for")
            if float(np.max(w) - np.min(w)) > 1e-12 * float(np.max(w)):
                raise self.refuse(rnd, f"its weights range from {float(np.min(w)):.3g} to "
                                  f"{float(np.max(w)):.3g}, where client-level DP weights "
                                  "every upload equally (its noise is calibrated for an equal "
                                  "sum)")
        if len(names) < self.min_clients:
            raise self.refuse(rnd, f"it sums {len(names)} uploads, fewer than this client's "
                              f"min_clients={self.min_clients}")
        if len(names) == 1 and names[0] != self.me:
            raise self.refuse(rnd, f"it claims the upload of {names[0][:100]!r} alone, which "
                               "would show this client that client's model")
        if self.me in names and rnd == self.uploaded:
            mine = float(w[names.index(self.me)])
            if abs(mine - self.weight) > 1e-9 * max(1.0, self.weight):
                raise self.refuse(rnd, f"it weights this client's upload {mine:.6g}, not "
                                   f"the {self.weight:.6g} it was given")
        return rnd, names, w, n, tries, noise_for

    def _forged(self, rnd: int, names: list[str], why: str) -> ProtocolError:
        shown = names if len(names) <= 8 else [*names[:8], "..."]
        return self.refuse(rnd, f"it is not the weighted sum of the uploads of round {rnd} "
                           f"by {shown} it claims ({why})")

    def check_real(self, rnd: int, names: list[str], w: NDArray[np.float64],
                   values: NDArray[np.float64], tags: NDArray[np.float64], tol: float,
                   scale_bits: int, guaranteed: int = 0) -> float:
        """Check a CKKS aggregate's tags (:func:`~islands.crypto.mac.real_deviation`).

        ``tol`` applies to the model the client uses, Σ p_j·x_j / Σ p_j: the tags may be
        off by ``tol``·Σ p_j. The server's products encode each p_j at 2^scale_bits.
        Returns the scale 1/Σ p_j the model is to be multiplied by.
        """
        applied = np.round(w * 2.0**scale_bits) / 2.0**scale_bits
        off = mac.real_deviation(self.mac_key(), rnd, names, w, values, tags, applied,
                                 guaranteed=guaranteed)
        total = float(np.sum(w))
        if not off <= tol * total:
            raise self._forged(rnd, names, f"its MAC tags are off by {off:.3g}, beyond "
                               f"{tol * total:.3g}")
        self.opened = max(self.opened, rnd)
        return 1.0 / total

    def check_modular(self, rnd: int, names: list[str], w: NDArray[np.float64],
                      counters: list[int], plaintexts: Sequence[int], tag: int,
                      modulus: int, guaranteed: int = 0) -> float:
        """Check a Paillier/OU aggregate's MAC (:func:`~islands.crypto.mac.modular_expected`).

        Returns the scale 1/Σ p_j the model is to be multiplied by.
        """
        want = mac.modular_expected(self.mac_key(), rnd, names, [float(x) for x in w],
                                    counters, plaintexts, modulus, guaranteed=guaranteed)
        if (int(tag) - want) % int(modulus):
            raise self._forged(rnd, names, "its MAC does not match")
        self.opened = max(self.opened, rnd)
        return 1.0 / float(np.sum(w))


# --------------------------------------------------------------------------- Paillier
def _int_bytes(v: int) -> bytes:
    raw = int(v).to_bytes((int(v).bit_length() + 7) // 8, "big")
    return len(raw).to_bytes(4, "big") + raw


_OU_KEY = b"islands ou key\x00"
"""Prefix of a dealt OU key: then len(public) (4 bytes, big-endian), public, secret."""


def _dealt_scheme(secret: bytes) -> str:
    """Name the scheme of a dealt key: 'ou', 'paillier' (len·p, len·q) or 'unknown'."""
    if secret.startswith(_OU_KEY):
        return "ou"
    k = int.from_bytes(secret[:4], "big")
    if len(secret) > 8 + k and int.from_bytes(secret[4 + k:8 + k], "big") == len(secret) - 8 - k:
        return "paillier"
    return "unknown"


class PaillierAggregator:
    """Packed additively homomorphic aggregation under a key shared by the clients.

    The engine is islands' Paillier (``he="paillier"``) or the Okamoto–Uchiyama scheme
    of SecretFlow's HEU (``he="ou"``, :mod:`islands.crypto.heu`: encryption and
    decryption in C++, every received key and ciphertext parsed by its checked parsers,
    224-bit encryption randomness). Both pack the same fixed-point slots
    (:func:`~islands.crypto.paillier.pack`) of value_bits + ⌈log2 max_clients⌉ bits.
    Paillier's plaintexts are integers modulo n, so ⌊(key_bits − 1)/slot_bits⌋ slots
    fit (40 at the defaults). OU's are integers modulo its secret prime p, and HEU
    decrypts |m| < 2^k with k ≥ ⌈key_bits/3⌉ − 1 for every key it generates
    (:func:`~islands.crypto.heu.min_plaintext_bits`), so ⌊k/slot_bits⌋ slots fit (13 at
    2048 bits: k = 682, slot_bits = 51); a client decrypts an aggregate only in
    (0, 2^(slots·slot_bits)) (HEU's ``decrypt_in_range``, against OU's plaintext-overflow
    attack) and refuses a dealt key whose plaintexts hold fewer bits.

    Parameters
    ----------
    key_bits : int, default=2048
        Size of n (under OU, the approximate size of n = p²q).
    frac_bits, int_bits : int, default=32, 8
        Fixed point: resolution 2^-frac_bits, |p·w| < 2^int_bits.
    max_clients : int, default=1024
        Headroom of each slot for the sum over the clients.
    packed : bool, default=True
        Many values per plaintext; False puts one per ciphertext (the paper's baseline,
        for comparisons only: 40× more ciphertexts at 2048 bits).
    he : {"paillier", "ou"}, default="paillier"
        The engine; "ou" needs sf-heu (``pip install 'islands[heu]'``).
    min_clients : int, default=1
        The fewest uploads an aggregate a client opens may sum (a single one must be
        its own); each client holds its own.
    """

    name = "paillier"

    def __init__(self, key_bits: int = 2048, frac_bits: int = 32, int_bits: int = 8,
                 max_clients: int = 1024, packed: bool = True, he: str = "paillier",
                 min_clients: int = 1) -> None:
        config = PaillierAggConfig.build(None, key_bits=key_bits, frac_bits=frac_bits,
                                         int_bits=int_bits, max_clients=max_clients,
                                         packed=packed, he=he, min_clients=min_clients)
        self.key_bits, self.packed, self.he = config.key_bits, config.packed, config.he
        self.min_clients = config.min_clients
        if self.he == "ou":
            _heu().require("PaillierAggregator")
            plain_bits = _heu().min_plaintext_bits(self.key_bits)
        else:
            plain_bits = self.key_bits - 1
        # the packing's own rules, checked now, before any message leaves a party; its
        # plaintexts (and their sums) stay below 2^plain_bits
        self.spec = _paillier().packing_spec(
            plain_bits + 1, frac_bits=config.frac_bits, int_bits=config.int_bits,
            max_terms=config.max_clients, slots=None if config.packed else 1)
        self.range_bits = self.spec.slots * self.spec.slot_bits

    def client_half(self) -> _PaillierClient | _OuClient:
        """Make a client half (holds the shared private key once dealt)."""
        return _OuClient(self) if self.he == "ou" else _PaillierClient(self)

    def server_half(self) -> _PaillierServer:
        """Make the server half (public key only)."""
        return _PaillierServer(self)

    def __repr__(self) -> str:
        engine = ", he='ou'" if self.he == "ou" else ""
        return f"PaillierAggregator(key_bits={self.key_bits}, packed={self.packed}{engine})"


def _paillier_fingerprint(public: bytes) -> bytes:
    paillier = _paillier()
    fingerprint: bytes = paillier.fingerprint(paillier.public_key_from_bytes(public))
    return fingerprint


class _PaillierClient:
    def __init__(self, config: PaillierAggregator) -> None:
        self.config = config
        self.public_key: Any = None
        self.private_key: Any = None
        self.pool: Any = None
        self.binding = _Binding("paillier", config.min_clients)
        self.keys = KeyReceiver("paillier", self._generate, self._install)

    def _generate(self) -> tuple[bytes, bytes]:
        paillier = _paillier()
        pk, sk = paillier.generate_keypair(self.config.key_bits)
        return _int_bytes(sk.p) + _int_bytes(sk.q), paillier.public_key_to_bytes(pk)

    def _install(self, secret: bytes) -> bytes:
        from phe import paillier as phe_paillier

        paillier = _paillier()
        b = self.binding
        if _dealt_scheme(secret) == "ou":
            raise _refuse_key("paillier", b.me, b.dealer, "he", "'paillier'", "'ou'")
        k = int.from_bytes(secret[:4], "big")
        p = int.from_bytes(secret[4:4 + k], "big")
        q = int.from_bytes(secret[8 + k:], "big")
        if p < 3 or q < 3:
            raise ProtocolError(f"client {b.me!r} got a malformed paillier key from dealer "
                                f"{b.dealer!r}", party=b.me, step="paillier-deliver")
        bits = (p * q).bit_length()
        if bits < self.config.key_bits:
            raise _refuse_key("paillier", b.me, b.dealer, "key_bits",
                              f"at least {self.config.key_bits}", bits)
        pk = phe_paillier.PaillierPublicKey(p * q)
        self.public_key, self.private_key = pk, phe_paillier.PaillierPrivateKey(pk, p, q)
        b.install(secret)
        fingerprint: bytes = paillier.fingerprint(pk)
        return fingerprint

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        self.binding.seen(party, server, step)
        if self.keys.handles(step):
            return self.keys.on_step(party, step, server=server)
        raise unexpected_step(party, step, "Paillier")

    def open(self, payload: Any) -> Vector:
        paillier = _paillier()
        b = self.binding
        rnd, names, w, n, counters, noise_for = b.claims(payload, "blob", counters=True)
        spec = self.config.spec
        count = spec.ciphertexts_for(n)
        if self.private_key is None:
            raise ProtocolError(f"client {b.me!r} has no Paillier key", party=b.me, step="task")
        try:
            plain = paillier.decrypt_blob(self.private_key, payload["blob"], count + 1)
        except ValidationError as exc:
            raise b.refuse(rnd, f"it does not decrypt ({exc})") from exc
        scale = b.check_modular(rnd, names, w, counters, plain[:count], plain[count],
                                int(self.public_key.n), noise_for)
        try:
            values: NDArray[np.float64] = paillier.unpack(plain[:count], n, spec,
                                                          terms=len(names))
        except ValidationError as exc:
            raise b.refuse(rnd, f"it does not decode ({exc})") from exc
        return (values * scale).astype(np.float32)

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> dict[str, Any]:
        paillier = _paillier()
        if self.public_key is None:
            raise ProtocolError(f"client {party.name!r} has no Paillier key", party=party.name,
                                step="update")
        self.binding.seen(party, server)
        self.binding.begin_upload(round)
        scaled = float(weight) * np.asarray(params, dtype=np.float64)
        try:
            plain = paillier.pack(scaled, self.config.spec)
        except ValidationError as exc:
            raise ValidationError(f"Paillier: client {party.name!r}'s update: {exc}") from exc
        n = int(self.public_key.n)
        tag, counter = mac.modular_tag(self.binding.mac_key(), round, party.name, weight,
                                       plain, n, represent=lambda r: r,
                                       guaranteed=self.binding.guaranteed(round))
        if self.pool is None:
            # precompute the next rounds' r^n on the other core while this client trains
            self.pool = paillier.RandomnessPool(self.public_key, len(plain) + 1,
                                                background=True, private_key=self.private_key)
        blob: bytes = paillier.encrypt_blob(self.public_key, [*plain, tag], pool=self.pool)
        self.binding.upload(round, weight)
        return {"blob": blob, "counter": counter}


class _PaillierServer(PlainServerHalf):
    def __init__(self, config: PaillierAggregator) -> None:
        self.config = config
        self.public_key: Any = None
        self.cipher: Any = None  # under OU: heu.OuCipher

    def load_public(self, public: bytes, owner: str = "server") -> bytes:
        """Parse the dealt public key (checked); return the fingerprint clients report."""
        if self.config.he == "ou":
            heu = _heu()
            self.cipher = heu.OuCipher.from_public_bytes(public, owner=owner,
                                                         min_bits=heu.MIN_KEY_BITS)
            fingerprint: bytes = self.cipher.fingerprint
            return fingerprint
        self.public_key = _paillier().public_key_from_bytes(public)
        return _paillier_fingerprint(public)

    def setup(self, link: ServerLink, clients: Sequence[str]) -> list[str]:
        _, dealt = deal_key(link, clients, "paillier",
                            lambda public: self.load_public(public, f"server {link.name!r}"))
        return dealt

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> _PaillierRound | _OuRound:
        # the packed values, then the MAC's ciphertext
        count = self.config.spec.ciphertexts_for(dim) + 1
        if self.config.he == "ou":
            return _OuRound(link.name, round, clients, weights, dim, self.cipher, count)
        paillier = _paillier()
        # encrypt_blob's layout: the key's fingerprint, then ciphertexts of
        # 2·ceil(bits(n)/8) bytes
        width = 2 * -(-int(self.public_key.n).bit_length() // 8)
        size = paillier.FINGERPRINT_BYTES + count * width
        return _PaillierRound(link.name, round, clients, weights, dim, self.public_key, size)

    def reveal(self, payload: Any) -> None:
        return None


def _split_upload(server: str, client: str, payload: Any, what: str) -> tuple[Any, int]:
    """Return a Paillier/OU upload's blob and MAC counter, or refuse it as malformed."""
    if (not isinstance(payload, dict) or set(payload) != {"blob", "counter"}
            or isinstance(payload["counter"], bool) or not isinstance(payload["counter"], int)
            or not 0 <= payload["counter"] < mac.MAX_COUNTER):
        raise MalformedUpdateError(
            f"client {client!r} sent a malformed {what} update: expected a dict of its "
            f"ciphertexts ('blob') and its MAC counter ('counter', an int in [0, "
            f"{mac.MAX_COUNTER}))", party=server, client=client)
    return payload["blob"], payload["counter"]


class _ModularRound(StreamingRound):
    """What the Paillier and OU rounds share: the counters and the aggregate's claims."""

    def __init__(self, server: str, round: int, clients: Sequence[str],
                 weights: Mapping[str, float], dim: int) -> None:
        super().__init__(server, clients, weights)
        self.round, self.dim = round, dim
        self.counters: dict[str, int] = {}

    def claims(self, blob: Any) -> dict[str, Any]:
        return {"blob": blob, "round": self.round, "contributors": list(self.added),
                "weights": [self.weights[c] for c in self.added], "length": self.dim,
                "counters": [self.counters[c] for c in self.added]}


class _PaillierRound(_ModularRound):
    def __init__(self, server: str, round: int, clients: Sequence[str],
                 weights: Mapping[str, float], dim: int, public_key: Any, size: int) -> None:
        super().__init__(server, round, clients, weights, dim)
        self.public_key, self.size = public_key, size
        self.total: bytes | None = None

    def add(self, client: str, payload: Any) -> None:
        paillier = _paillier()
        self.expect(client)
        blob, counter = _split_upload(self.server, client, payload, "Paillier")
        if not isinstance(blob, bytes) or len(blob) != self.size:
            got = f"{len(blob)} bytes" if isinstance(blob, bytes) else type(blob).__name__
            raise MalformedUpdateError(
                f"client {client!r} sent a malformed Paillier update: {got}, where "
                f"{self.dim} values and their MAC under this key take {self.size} bytes",
                party=self.server, client=client)
        try:
            blobs = [blob] if self.total is None else [self.total, blob]
            total = paillier.sum_encrypted(self.public_key, blobs)
        except ValidationError as exc:
            raise MalformedUpdateError(f"client {client!r}'s Paillier update: {exc}",
                                       party=self.server, client=client) from exc
        self.admit(client)
        self.total, self.counters[client] = total, counter

    def finish(self, survivors: Sequence[str]) -> dict[str, Any]:
        self.check_survivors(survivors)
        return self.claims(self.total)


# --------------------------------------------------------------------------- OU (HEU)
class _OuClient:
    """A client under ``he="ou"``: the dealt HEU key pair, packed slots as Paillier's."""

    def __init__(self, config: PaillierAggregator) -> None:
        self.config = config
        self.owner: Any = None  # heu.OuKeyOwner once dealt
        self.cipher: Any = None  # heu.OuCipher
        self.binding = _Binding("ou", config.min_clients)
        self.keys = KeyReceiver("paillier", self._generate, self._install)

    def _generate(self) -> tuple[bytes, bytes]:
        owner = _heu().OuKeyOwner(self.config.key_bits)
        public = owner.public_bytes()
        return (_OU_KEY + len(public).to_bytes(4, "big") + public + owner.secret_bytes(),
                public)

    def _refuse(self, name: str, want: str, got: Any) -> ProtocolError:
        b = self.binding
        return _refuse_key("ou", b.me, b.dealer, name, want, got, step="paillier-deliver")

    def _install(self, secret: bytes) -> bytes:
        heu = _heu()
        b = self.binding
        scheme = _dealt_scheme(secret)
        if scheme != "ou":
            raise self._refuse("he", "'ou'", f"{scheme!r}")
        start = len(_OU_KEY) + 4
        k = int.from_bytes(secret[len(_OU_KEY):start], "big")
        try:
            owner = heu.OuKeyOwner.from_key_bytes(
                secret[start:start + k], secret[start + k:], owner=f"client {b.me!r}",
                min_bits=heu.MIN_KEY_BITS)
        except ValidationError as exc:
            raise ProtocolError(f"client {b.me!r} got a malformed ou key from dealer "
                                f"{b.dealer!r}: {exc}", party=b.me,
                                step="paillier-deliver") from exc
        cipher = owner.cipher()
        if cipher.n_bits < self.config.key_bits:
            raise self._refuse("key_bits", f"at least {self.config.key_bits}", cipher.n_bits)
        if cipher.plaintext_bits < self.config.range_bits:
            raise self._refuse("key_bits", f"a key whose plaintexts hold the packing's "
                               f"{self.config.range_bits} bits",
                               f"plaintexts of {cipher.plaintext_bits} bits")
        self.owner, self.cipher = owner, cipher
        b.install(secret)
        fingerprint: bytes = cipher.fingerprint
        return fingerprint

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        self.binding.seen(party, server, step)
        if self.keys.handles(step):
            return self.keys.on_step(party, step, server=server)
        raise unexpected_step(party, step, "Paillier (OU)")

    def open(self, payload: Any) -> Vector:
        b = self.binding
        rnd, names, w, n, counters, noise_for = b.claims(payload, "blob", counters=True)
        spec = self.config.spec
        if self.cipher is None:
            raise ProtocolError(f"client {b.me!r} has no ou key", party=b.me, step="task")
        count = spec.ciphertexts_for(n)
        try:
            cts = self.cipher.from_bytes(payload["blob"], count + 1, "the aggregate",
                                         f"client {b.me!r}")
            plain = self.owner.decrypt(self.cipher.take(cts, range(count)),
                                       self.config.range_bits, positive=True,
                                       what="an aggregate", sender=f"server {b.server!r}",
                                       party=b.me, step="task")
            # compared below and never shown to anyone: no range (heu.decrypt_residues)
            tag = self.owner.decrypt_residues(self.cipher.take(cts, [count]))[0]
        except (ValidationError, ProtocolError) as exc:
            raise b.refuse(rnd, f"it does not decrypt ({exc})") from exc
        scale = b.check_modular(rnd, names, w, counters, plain, tag,
                                self.owner.secret_prime(), noise_for)
        try:
            values: NDArray[np.float64] = _paillier().unpack(plain, n, spec, terms=len(names))
        except ValidationError as exc:
            raise b.refuse(rnd, f"it does not decode ({exc})") from exc
        return (values * scale).astype(np.float32)

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> dict[str, Any]:
        if self.cipher is None:
            raise ProtocolError(f"client {party.name!r} has no OU key", party=party.name,
                                step="update")
        self.binding.seen(party, server)
        self.binding.begin_upload(round)
        scaled = float(weight) * np.asarray(params, dtype=np.float64)
        try:
            plain = _paillier().pack(scaled, self.config.spec)
        except ValidationError as exc:
            raise ValidationError(f"Paillier (OU): client {party.name!r}'s update: "
                                  f"{exc}") from exc
        p, bound = self.owner.secret_prime(), 2**self.cipher.plaintext_bits

        def represent(r: int) -> int | None:  # HEU encrypts |m| <= its plaintext bound
            return r if r <= bound else r - p if p - r <= bound else None

        tag, counter = mac.modular_tag(self.binding.mac_key(), round, party.name, weight,
                                       plain, p, represent,
                                       guaranteed=self.binding.guaranteed(round))
        blob: bytes = self.cipher.to_bytes(self.cipher.encrypt([*plain, tag]))
        self.binding.upload(round, weight)
        return {"blob": blob, "counter": counter}


class _OuRound(_ModularRound):
    def __init__(self, server: str, round: int, clients: Sequence[str],
                 weights: Mapping[str, float], dim: int, cipher: Any, count: int) -> None:
        super().__init__(server, round, clients, weights, dim)
        self.cipher, self.count = cipher, count
        self.total: Any = None

    def add(self, client: str, payload: Any) -> None:
        self.expect(client)
        blob, counter = _split_upload(self.server, client, payload, "OU")
        try:  # the sum is left untouched by a rejected upload
            cts = self.cipher.from_bytes(blob, self.count, "its update",
                                         f"server {self.server!r}")
            total = cts if self.total is None else self.cipher.add(self.total, cts)
        except ValidationError as exc:
            raise MalformedUpdateError(
                f"client {client!r} sent a malformed OU update ({self.dim} values and their "
                f"MAC take {self.count} ciphertexts): {exc}", party=self.server,
                client=client) from exc
        self.admit(client)
        self.total, self.counters[client] = total, counter

    def finish(self, survivors: Sequence[str]) -> dict[str, Any]:
        self.check_survivors(survivors)
        return self.claims(self.cipher.to_bytes(self.total))


# --------------------------------------------------------------------------- CKKS
class CKKSAggregator:
    """CKKS aggregation (TenSEAL) under a key shared by the clients, as APFL.

    Parameters
    ----------
    poly_modulus_degree, coeff_mod_bit_sizes, scale_bits
        CKKS parameters (:class:`islands.crypto.ckks.CKKSParams`; the defaults keep the
        error on model weights below 1e-6 at 128-bit security).
    min_clients : int, default=1
        The fewest uploads an aggregate a client opens may sum (a single one must be
        its own); each client holds its own.
    """

    name = "ckks"

    def __init__(self, poly_modulus_degree: int | None = None,
                 coeff_mod_bit_sizes: Sequence[int] | None = None,
                 scale_bits: int | None = None, min_clients: int = 1) -> None:
        config = CkksConfig.build(
            None, poly_modulus_degree=poly_modulus_degree,
            coeff_mod_bit_sizes=coeff_mod_bit_sizes, scale_bits=scale_bits,
            min_clients=min_clients)
        self.params, self.min_clients = config.params(), config.min_clients

    def client_half(self) -> _CKKSClient:
        """Make a client half (holds the shared secret context once dealt)."""
        return _CKKSClient(self)

    def server_half(self) -> _CKKSServer:
        """Make the server half (public context only)."""
        return _CKKSServer()

    def __repr__(self) -> str:
        return f"CKKSAggregator({self.params!r})"


def _check_dealt(got: Any, own: Any, b: _Binding) -> None:
    """Refuse a dealt CKKS context with less security, precision or range than ``own``."""
    if got.poly_modulus_degree < own.poly_modulus_degree:
        raise _refuse_key("ckks", b.me, b.dealer, "poly_modulus_degree",
                          f"at least {own.poly_modulus_degree}", got.poly_modulus_degree)
    if got.scale_bits < own.scale_bits:
        raise _refuse_key("ckks", b.me, b.dealer, "scale_bits", f"at least {own.scale_bits}",
                          got.scale_bits)
    if got.max_abs_sum < own.max_abs_sum:
        raise _refuse_key("ckks", b.me, b.dealer, "coeff_mod_bit_sizes",
                          f"data primes that hold sums up to {own.max_abs_sum:.6g}",
                          f"{got.coeff_mod_bit_sizes} (sums up to {got.max_abs_sum:.6g})")
    # the lattice estimate's security falls as log2(q)/N grows
    limit = sum(own.coeff_mod_bit_sizes) * got.poly_modulus_degree // own.poly_modulus_degree
    if sum(got.coeff_mod_bit_sizes) > limit:
        raise _refuse_key("ckks", b.me, b.dealer, "coeff_mod_bit_sizes",
                          f"at most {limit} bits in total at "
                          f"poly_modulus_degree={got.poly_modulus_degree}",
                          f"{got.coeff_mod_bit_sizes} ({sum(got.coeff_mod_bit_sizes)} bits)")


def _ckks_fingerprint(public: bytes) -> bytes:
    return ckks.fingerprint(ckks.load_context(public, secret=False))


class _CKKSClient:
    def __init__(self, config: CKKSAggregator) -> None:
        self.config = config
        self.context: Any = None
        self.binding = _Binding("ckks", config.min_clients)
        self.keys = KeyReceiver("ckks", self._generate, self._install)

    def _generate(self) -> tuple[bytes, bytes]:
        ctx = ckks.make_context(self.config.params)
        return ckks.secret_context_bytes(ctx), ckks.public_context_bytes(ctx)

    def _install(self, secret: bytes) -> bytes:
        b = self.binding
        try:
            context = ckks.load_context(secret, secret=True)
        except ValidationError as exc:
            raise ProtocolError(f"client {b.me!r} got a malformed ckks key from dealer "
                                f"{b.dealer!r}: {exc}", party=b.me, step="ckks-deliver") from exc
        _check_dealt(ckks._params_of(context, "CKKSAggregator"), self.config.params, b)
        self.context = context
        b.install(secret)
        return ckks.fingerprint(self.context)

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        self.binding.seen(party, server, step)
        if self.keys.handles(step):
            return self.keys.on_step(party, step, server=server)
        raise unexpected_step(party, step, "CKKS")

    def open(self, payload: Any) -> Vector:
        b = self.binding
        rnd, names, w, n, _, noise_for = b.claims(payload, "chunks")
        if self.context is None:
            raise ProtocolError(f"client {b.me!r} has no CKKS key", party=b.me, step="task")
        try:
            values = ckks.decrypt_vector(self.context, payload["chunks"],
                                         n + mac.real_tag_count(n))
        except ValidationError as exc:
            raise b.refuse(rnd, f"it does not decrypt ({exc})") from exc
        # CKKS decrypts to about 2^-(scale_bits-10) per unit of weight; 64 times that
        # covers the sum's noise (crypto/mac.py: the weights' rounding is replayed)
        bits = ckks._params_of(self.context, "CKKSAggregator").scale_bits
        scale = b.check_real(rnd, names, w, values[:n], values[n:], 2.0 ** -(bits - 16),
                             bits, noise_for)
        return (values[:n] * scale).astype(np.float32)

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> Any:
        if self.context is None:
            raise ProtocolError(f"client {party.name!r} has no CKKS key", party=party.name,
                                step="update")
        self.binding.seen(party, server)
        self.binding.begin_upload(round)
        if not mac.MIN_WEIGHT <= float(weight) <= 1.0:
            raise ValidationError(
                f"CKKS: client {party.name!r} was given weight {float(weight)!r}, outside "
                f"[{mac.MIN_WEIGHT:g}, 1] (its MAC binds weights of at least that)")
        x = np.asarray(params, dtype=np.float64)
        tags = mac.real_tags(self.binding.mac_key(), round, party.name, x, weight,
                             guaranteed=self.binding.guaranteed(round))
        limit = ckks._params_of(self.context, "CKKSAggregator").max_abs_sum
        peak = float(np.max(np.abs(tags)))
        if peak > limit:  # NaN and inf in the values: encrypt_vector names them
            raise ValidationError(
                f"CKKS: client {party.name!r}'s update is too large for its MAC: a tag "
                f"reaches {peak:.3g}, above the {limit:.3g} this CKKS context decrypts (tags "
                f"grow up to {mac.BLOCK ** 0.5:.0f}·max|w| + 1/p for weight p; keep |w| "
                f"below {(limit - 1 / float(weight)) / mac.BLOCK ** 0.5:.4g})")
        chunks = ckks.encrypt_vector(self.context, np.concatenate([x, tags]))
        self.binding.upload(round, weight)
        return chunks


class _CKKSServer(PlainServerHalf):
    def __init__(self) -> None:
        self.context: Any = None

    def setup(self, link: ServerLink, clients: Sequence[str]) -> list[str]:
        public, dealt = deal_key(link, clients, "ckks", _ckks_fingerprint)
        self.context = ckks.load_context(public, secret=False)
        return dealt

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> _CKKSRound:
        return _CKKSRound(link.name, round, clients, weights, dim, self.context)

    def reveal(self, payload: Any) -> None:
        return None


class _CKKSRound(StreamingRound):
    def __init__(self, server: str, round: int, clients: Sequence[str],
                 weights: Mapping[str, float], dim: int, context: Any) -> None:
        super().__init__(server, clients, weights)
        self.round, self.dim = round, dim
        self.sum = ckks.EncryptedSum(context, dim + mac.real_tag_count(dim))

    def add(self, client: str, payload: Any) -> None:
        weight = self.expect(client)
        try:  # the sum is left untouched by a rejected upload
            self.sum.add(payload, weight)
        except ValidationError as exc:
            raise MalformedUpdateError(f"client {client!r}'s CKKS update: {exc}",
                                       party=self.server, client=client) from exc
        self.admit(client)

    def finish(self, survivors: Sequence[str]) -> dict[str, Any]:
        self.check_survivors(survivors)
        return {"chunks": self.sum.result(), "round": self.round,
                "contributors": list(self.added),
                "weights": [self.weights[c] for c in self.added], "length": self.dim}
