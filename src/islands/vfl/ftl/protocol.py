"""The roles of federated transfer learning: source B (labels) and target A, two parties.

The two-party flow of Liu et al. (2020), §4 [1]_: no coordinator; each party makes its
own key pair (``he="ou"``: Okamoto–Uchiyama on HEU, :mod:`islands.crypto.heu`;
``"paillier"``: islands' DJN Paillier, :mod:`islands.crypto.paillier_ops`), computes
the other party's gradient terms under the *other* party's key from that party's
encrypted components and its own plaintext, adds a pad, and asks the key owner to
decrypt. The maths is
:mod:`islands.vfl.ftl.maths`; ⟦·⟧_A is encryption under A's key, ⟦·⟧_B under B's.

Messages of one mini-batch I of b overlap rows (``he="ou"`` or ``"paillier"``):

=========  ======  ===================================================================
tag        from→to payload
=========  ======  ===================================================================
terms      B → A   ⟦P̃⟧_B (b × d), P̃_i = α·Φᵀt_i − 2γ·u_i^B at scale 2^(2f), and
                   ⟦Q̃⟧_B (d × d), Q̃ = α·ΦᵀMΦ at scale 2^f
reps       A → B   ⟦U⟧_A (b × d) and ⟦S⟧_A (d × d), S = UᵀU, at scale 2^f
masked     A → B   ⟦P̃_i + Q̃u_i + r_i⟧_B for every row: Π_k ⟦Q̃_jk⟧^(u_ik)·⟦P̃_ij⟧ times
                   a fresh encryption of the pad r (see the pads below)
masked     B → A   ⟦G + R⟧_A (K × d), G = Σ_i t_i u_iᵀ + MΦS; with symmetric alignment
                   also ⟦U + R'⟧_A; and ⟦b·L + ρ⟧_A, the batch loss (every pad fresh)
opened     B → A   A's masked values, decrypted by B
opened     A → B   B's masked values, decrypted by A
status     B → A   after every epoch: its mean loss and whether training goes on
=========  ======  ===================================================================

Each party removes its pads and back-propagates its gradient through its own network:
A's rows get (P̃_i + Q̃u_i + 2γu_i)/b, B's representations (α/b)·W·G (plus
(2γ/b)(u_i^B − u_i^A) on the batch rows when the alignment is symmetric) and B adds
its local source loss. With ``he="none"`` the same terms travel in the clear
(``terms`` and ``reps`` only): the unprotected baseline the benchmarks compare with.

What each party learns (honest-but-curious, no collusion: the paper's model; each
party decrypts whatever its peer sends, so a peer that deviates, e.g. returns the other's
own ciphertexts without pads, reads them in the clear; nothing here defends that):

- Both: the hello shows the other's row and feature counts and K; the epoch losses.
- A sees B's terms only encrypted; what it decrypts is its own gradient
  P̃_i + Q̃u_i for every batch row, which mixes B's label of that row, Φ and u_i^B.
  That leaks B's labels of the overlap rows, as per-row gradients at a cut layer do in
  split learning. In a review run on breast cancer (γ = 1, anchored, 3 epochs) the sign
  of the first principal component of A's decrypted gradients gave the right label for
  87% of the rows (62% by guessing the majority class); with γ = 0 and the binary
  logistic loss every gradient is parallel to Φ and A reads every label of a batch up
  to one sign. This leak is not defended.
- B sees A's rows only encrypted and decrypts the aggregate G (K × d) and the loss.
  From a batch of b ≤ K − 1 rows B could solve G for A's rows (a review recovered u
  exactly from a one-row batch), so every batch has more than K rows (:func:`batch_order`,
  :func:`check_rows`). With symmetric alignment (the paper's loss) B's own gradient is
  (2γ/b)(u_i^B − u_i^A) on the batch rows, so B learns A's representations u_i^A of
  every overlap row exactly: any protocol that lets B back-propagate its own per-row
  gradient reveals them. Anchored alignment removes that term.
- Inference (:func:`infer_source`, :func:`infer_target`): A learns Φu for its rows, so
  after d queries with independent representations A can solve for Φ; B learns nothing.
- Each network starts from its owner's private seed (``init_seed``), not the plan's.
- Pads come from ``secrets``. Under Paillier they are uniform modulo n and the opened
  values are residues modulo n. OU's plaintext modulus p is secret, so there the pads
  are statistical: R = 2^k + U, U uniform below 2^(k+128), for values |V| < 2^k with k
  from the plan alone (:func:`islands.vfl.ftl.maths.value_bits`); the key owner decrypts
  only values in (0, 2^(k+129)) and refuses anything else naming the peer (a decryption
  beyond p would reveal the key), the pad's owner refuses returned values outside that
  range, and both refuse at ``hello`` a key whose plaintexts cannot hold k + 129 bits.
  Every value sent for decryption carries a fresh encryption, which hides how it was
  computed from the key owner (Paillier: perfectly with textbook randomness,
  computationally with DJN's short exponents; OU: computationally, with 224-bit
  randomness, :func:`islands.crypto.heu.lengthen`).
- Each party checks the key in the other's hello (at least its own ``key_bits``, which
  is at least 2048 unless it opted into ``insecure_keys``, :mod:`islands.vfl.keys`; the
  scheme's structure) and every ciphertext it receives (count, range, units) before
  using it.

The paper encrypts the gradient of every network *parameter* (Σ_i ∂u_i/∂θ ·
⟦∂L/∂u_i⟧, one ciphertext operation per parameter, row and dimension); for networks
of more than a few hundred weights that is out of reach, so, like FATE's FTL, the
parties exchange the gradient at the representation instead and back-propagate it
locally. That is the difference that reveals per-row gradients to their owner.

References
----------
.. [1] Y. Liu, Y. Kang, C. Xing, T. Chen, Q. Yang. "A Secure Federated Transfer Learning
   Framework." IEEE Intelligent Systems 35(4), 2020 (arXiv:1812.03337).
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from islands.arrays import Array, IntArray
from islands.config import check_same_plan
from islands.crypto import heu, paillier
from islands.crypto.paillier_ops import VectorCipher, decrypt_many, modular_unmask
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party, wire
from islands.vfl.ftl import maths, ss
from islands.vfl.ftl.config import ALIGNMENTS, Plan, batch_order, check_plan
from islands.vfl.ftl.maths import TaylorLoss
from islands.vfl.keys import min_peer_key_bits
from islands.vfl.protocol import Clock

__all__ = [
    "ALIGNMENTS",
    "Plan",
    "SourceModel",
    "TargetModel",
    "check_plan",
    "infer_source",
    "infer_target",
    "make_net",
    "source",
    "target",
]




@wire.register(name="ftl.Hello")
@dataclass(frozen=True)
class Hello:
    """A party's overlap rows, feature count, plan text and public key (None: clear).

    ``public_key`` is the Paillier modulus n (``he="paillier"``, with ``djn_base``) or
    the OU key's HEU serialisation (``he="ou"``).
    """

    rows: int = field(metadata={"ge": 0})
    features: int = field(metadata={"ge": 0})
    plan: str
    public_key: bytes | None
    djn_base: int | None
    scores: int = field(metadata={"ge": 0})


@wire.register(name="ftl.Pair")
@dataclass(frozen=True)
class Pair:
    """Two components of one step: ciphertext blobs, or float arrays in the clear."""

    first: Any
    second: Any


@wire.register(name="ftl.Status")
@dataclass(frozen=True)
class Status:
    """End of an epoch: its mean loss and whether training goes on."""

    epoch: int = field(metadata={"ge": 0})
    loss: float
    go_on: bool


@dataclass
class SourceModel:
    """What B ends with: its network, Φ (K × d) and the loss of every epoch."""

    net: Any
    phi: Array
    epoch_losses: list[float]
    batch_losses: list[float]
    epochs: int
    converged: bool
    clock: Clock = field(default_factory=Clock)


@dataclass
class TargetModel:
    """What A ends with: its network and the losses B reported."""

    net: Any
    epoch_losses: list[float]
    epochs: int
    clock: Clock = field(default_factory=Clock)


def make_net(n_features: int, plan: Plan, seed: int | None) -> Any:
    """Return a party's network, its initial weights drawn from its own ``seed``.

    Linear layers with torch's default uniform(±1/√fan_in) initialisation, drawn from a
    private generator so that parties running in threads of one process do not share
    torch's global random state. ``seed`` is the party's own (None: fresh CSPRNG bits),
    not the plan's public seed, so that the peer cannot rebuild its initial network.
    """
    import torch

    widths = [n_features, *plan.hidden, plan.dim]
    layers: list[Any] = []
    for i, (w_in, w_out) in enumerate(itertools.pairwise(widths)):
        if i:
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.utils.skip_init(  # type: ignore[no-untyped-call]
            torch.nn.Linear, w_in, w_out))
    net = torch.nn.Sequential(*layers)
    gen = torch.Generator().manual_seed(secrets.randbits(62) if seed is None else int(seed))
    with torch.no_grad():
        for layer in net:
            if isinstance(layer, torch.nn.Linear):
                bound = 1.0 / float(np.sqrt(layer.in_features))
                torch.nn.init.uniform_(layer.weight, -bound, bound, generator=gen)
                torch.nn.init.uniform_(layer.bias, -bound, bound, generator=gen)
    return net


def _optimizer(net: Any, plan: Plan) -> Any:
    import torch

    return torch.optim.Adam(net.parameters(), lr=plan.learning_rate,
                            weight_decay=plan.weight_decay)


def _tensor(x: Array) -> Any:
    import torch

    return torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32)


# ------------------------------------------------------------------ crypto plumbing
# A cipher is islands' VectorCipher (he="paillier": ciphertexts are lists) or HEU's
# OuCipher (he="ou": ciphertext columns); the helpers below are the few operations whose
# form differs, so each step is written once for both schemes.
Cipher = VectorCipher | heu.OuCipher


class _Keys:
    """One party's key pair and ciphers for its own and its peer's public key."""

    def __init__(self, plan: Plan, party: str) -> None:
        self.he = plan.he or "none"
        # engine="ss" (:mod:`islands.vfl.ftl.ss`) uses no key either
        self.plain = plan.he == "none" or plan.engine == "ss"
        self.djn = plan.djn
        self.min_peer_bits = min_peer_key_bits(plan.key_bits, plan.insecure_keys)
        self.mine: Cipher | None = None
        self.peer: Cipher | None = None
        self.private: Any = None
        self.owner: heu.OuKeyOwner | None = None
        self.public_key: bytes | None = None
        self.djn_base: int | None = None
        if self.plain:
            return
        if plan.he == "ou":
            heu.require(f"party {party!r}")
            self.owner = heu.OuKeyOwner(plan.key_bits)
            self.mine = self.owner.cipher()
            self.public_key = self.owner.public_bytes()
            return
        if plan.djn:
            public, self.private, base = paillier.generate_djn_keypair(plan.key_bits)
            self.djn_base = int(base)
        else:
            public, self.private = paillier.generate_keypair(plan.key_bits)
        self.mine = VectorCipher(public, self.djn_base)
        self.public_key = paillier.public_key_to_bytes(public)

    def attach_peer(self, hello: Hello, peer: str, me: str, room: int) -> None:
        """Check the peer's key (and, under OU, that both keys hold ``room`` bits)."""
        if self.plain:
            if hello.public_key is not None:
                raise ValidationError(f"party {me!r}: peer {peer!r} encrypts but this party "
                                      "runs without a key (engine='ss' or he='none')")
            return
        self.peer = _peer_cipher(hello, peer, me, self.he, self.min_peer_bits, self.djn)
        if isinstance(self.peer, heu.OuCipher):
            assert isinstance(self.mine, heu.OuCipher)
            where = f"party {me!r}"
            self.mine.check_room(room, "the masked values it decrypts", where)
            try:
                self.peer.check_room(room, "the masked values it sends", where)
            except ValidationError as exc:
                raise ProtocolError(f"{exc} (hello from {peer!r})", party=me,
                                    step="hello") from None

    def decrypt(self, cts: Any, value_bits: int, what: str, sender: str, me: str,
                step: str) -> list[int]:
        """Decrypt masked values from ``sender``.

        Paillier: residues modulo this party's n (uniform pads; no range is read). OU:
        values in (0, 2^(value_bits + σ + 1)), anything else refused
        (:meth:`islands.crypto.heu.OuKeyOwner.decrypt`).
        """
        if self.owner is not None:
            return self.owner.decrypt(cts, value_bits + heu.MASK_BITS + 1, positive=True,
                                      what=what, sender=f"peer {sender!r}", party=me,
                                      step=step)
        return decrypt_many(self.private, cts)


def _peer_cipher(hello: Hello, peer: str, me: str, he: str, min_bits: int,
                 djn: bool) -> Cipher:
    """Return a cipher for the public key (and DJN base, checked) in the peer's hello.

    The key must have at least ``min_bits`` (this party's ``key_bits``, never below the
    floor without its own ``insecure_keys``: :func:`~islands.vfl.keys.min_peer_key_bits`);
    a DJN base is refused when this party's plan says ``djn=False`` or ``he="ou"``.
    """
    where = f"party {me!r} (hello from {peer!r})"
    if not isinstance(hello.public_key, bytes):
        raise ValidationError(f"party {me!r}: peer {peer!r} sent no public key")
    if he == "ou":
        if hello.djn_base is not None:
            raise ProtocolError(f"party {me!r}: peer {peer!r} sent a DJN base with an OU key",
                                party=me, step="hello")
        try:
            return heu.OuCipher.from_public_bytes(hello.public_key, owner=where,
                                                  min_bits=min_bits)
        except ValidationError as exc:
            raise ProtocolError(str(exc), party=me, step="hello") from None
    try:
        public = paillier.public_key_from_bytes(hello.public_key, min_bits=min_bits)
    except ValidationError as exc:
        raise ProtocolError(f"{where}: {exc}", party=me, step="hello") from None
    base = None
    if hello.djn_base is not None:
        if not djn:
            raise ProtocolError(f"party {me!r}: peer {peer!r} sent a DJN base, but the plan "
                                "says djn=False (textbook randomness)", party=me, step="hello")
        base = int(paillier.check_djn_base(public, hello.djn_base, where))
    return VectorCipher(public, base)


def _masks(cipher: Cipher, count: int, value_bits: int) -> list[int]:
    """Return pads for values below 2^value_bits: uniform mod n (Paillier), statistical (OU)."""
    if isinstance(cipher, heu.OuCipher):
        return cipher.masks(count, value_bits)
    return [secrets.randbelow(cipher.n) for _ in range(count)]


def _encrypt_masks(cipher: Cipher, masks: list[int], shift: int = 0) -> Any:
    """Fresh encryptions of the masks, ``shift`` added to the last (the loss's constant)."""
    values = list(masks)
    if shift:
        values[-1] += shift
    if isinstance(cipher, heu.OuCipher):
        return cipher.encrypt(values)
    n, half = cipher.n, cipher.half
    # residues modulo n through the signed interface
    return cipher.encrypt([v - n if v > half else v for v in (w % n for w in values)])


def _unmask(cipher: Cipher, opened: Any, masks: list[int], value_bits: int, name: str,
            owner: str, peer: str) -> list[int]:
    """Remove the pads from the values the peer decrypted, checking what it returned."""
    if isinstance(cipher, heu.OuCipher):
        try:
            return cipher.unmask(opened, masks, value_bits)
        except ValidationError as exc:
            raise ProtocolError(f"peer {peer!r} returned malformed {name} ({exc})",
                                party=owner, step=name) from None
    returned = _residues(opened, len(masks), cipher.n, name, owner)
    return modular_unmask(cipher.n, returned, masks)


def _take(cipher: Cipher, cts: Any, indices: list[int]) -> Any:
    if isinstance(cipher, heu.OuCipher):
        return cipher.take(cts, indices)
    return [cts[i] for i in indices]


def _concat(cipher: Cipher, parts: list[Any]) -> Any:
    if isinstance(cipher, heu.OuCipher):
        return cipher.concat(parts)
    return [c for part in parts for c in part]


def _blob(cipher: Cipher, value: Any, count: int, name: str, owner: str) -> Any:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"{name} is not a ciphertext blob", party=owner, step=name)
    try:
        return cipher.from_bytes(value, count, name, owner)
    except ValidationError as exc:
        raise ProtocolError(str(exc), party=owner, step=name) from None


def _array(value: Any, shape: tuple[int, ...], name: str, owner: str) -> Array:
    if not isinstance(value, np.ndarray) or value.shape != shape or value.dtype != np.float64 \
            or not np.all(np.isfinite(value)):
        raise ProtocolError(f"{name} must be a finite float64 array of shape {shape}",
                            party=owner, step=name)
    return value


def _residues(value: Any, count: int, n: int, name: str, owner: str) -> list[int]:
    if not isinstance(value, list) or len(value) != count or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n for v in value):
        raise ProtocolError(f"{name} must be {count} residues modulo n", party=owner, step=name)
    return value


def _products(cipher: Cipher, cts: Any, rows: int, cols: int, weights: IntArray) -> Any:
    """⟦Wᵀ X⟧ (k × cols, row-major) for X (rows × cols, row-major ciphertexts), W (rows × k).

    OU: one bucket-method product of the whole matrix
    (:meth:`islands.crypto.heu.OuCipher.products`); Paillier: one weighted sum per column
    of X.
    """
    if isinstance(cipher, heu.OuCipher):
        return cipher.as_column(cipher.products(cipher.as_matrix(cts, rows, cols), weights))
    k = weights.shape[1]
    out = [cipher.weighted([cts[r * cols + c] for r in range(rows)], weights)
           for c in range(cols)]
    return [out[c][f] for f in range(k) for c in range(cols)]


def _check_hello(party: Party, peer: str, theirs: Any, plan: str) -> Hello:
    if not isinstance(theirs, Hello):
        raise ProtocolError(f"peer {peer!r} sent a malformed hello", party=party.name,
                            step="hello")
    check_same_plan(plan, theirs.plan, party=party.name, peer=peer)
    return theirs


def _hello(party: Party, peer: str, mine: Hello, clock: Clock) -> Hello:
    with clock.timing("messaging"):
        party.send(peer, "hello", mine)
        theirs = party.recv(peer, "hello")
    theirs = _check_hello(party, peer, theirs, mine.plan)
    if theirs.rows != mine.rows:
        raise ValidationError(f"party {party.name!r} holds {mine.rows} overlap rows but "
                              f"{peer!r} holds {theirs.rows}; align them first (PSI)")
    return theirs




def _check_dealer(plan: Plan, dealer: str | None, me: str, peer: str) -> None:
    """engine="ss" needs a dealer, a third party; engine="he" none."""
    if plan.engine == "ss":
        if dealer is None:
            raise ValidationError(f"party {me!r}: engine='ss' needs a dealer: name a dealer "
                                  "that colludes with neither party, or set engine='he'")
        if dealer in (me, peer):
            raise ValidationError(f"party {me!r}: the dealer {dealer!r} must be a third "
                                  f"party, neither {me!r} nor {peer!r}")
    elif dealer is not None:
        raise ValidationError(f"party {me!r}: a dealer ({dealer!r}) serves engine='ss' only; "
                              f"the plan says engine={plan.engine!r}")


def check_rows(rows: int, plan: Plan, scores: int, owner: str) -> None:
    """Refuse overlaps or batches of at most K rows (see :func:`batch_order`)."""
    if rows <= scores or plan.batch_size <= scores:
        raise ValidationError(f"{owner}: FTL needs more than K = {scores} overlap rows and "
                              f"batch_size > {scores} (B could otherwise solve a batch's "
                              f"aggregate for A's rows); got {rows} rows, batch_size "
                              f"{plan.batch_size}")


def _improved(losses: list[float], tol: float | None) -> bool:
    """Whether the last epoch lowered the loss by more than tol·max(|previous|, 1)."""
    if tol is None or len(losses) < 2:
        return True
    prev, last = losses[-2], losses[-1]
    return prev - last > tol * max(abs(prev), 1.0)


# ------------------------------------------------------------------ roles
def target(party: Party, X: Any, *, peer: str = "B", plan: Plan,
           init_seed: int | None = None, dealer: str | None = None) -> TargetModel:
    """Play A, the target party: features of the overlap rows, no labels.

    Parameters
    ----------
    party
        This party's context.
    X
        A's features of the overlap rows (N_AB × p_A), in the order both parties agreed
        (:func:`islands.psi.initiator` / ``responder`` give it), standardised.
    peer
        B's name.
    plan
        The shared :class:`Plan`.
    init_seed
        A's private seed for its initial weights (None: fresh random bits).
    dealer
        D's name, needed by ``engine="ss"`` (:mod:`islands.vfl.ftl.ss`).

    Returns
    -------
    TargetModel
    """
    plan = check_plan(plan, f"party {party.name!r}")
    x = np.asarray(X, dtype=np.float64)
    if x.ndim != 2 or not np.all(np.isfinite(x)):
        raise ValidationError(f"party {party.name!r}: X must be a finite 2-D array")
    _check_dealer(plan, dealer, party.name, peer)
    clock = Clock()
    keys = _Keys(plan, party.name)
    hello = _hello(party, peer, Hello(x.shape[0], x.shape[1], plan.text(), keys.public_key,
                                      keys.djn_base, 0), clock)
    keys.attach_peer(hello, peer, party.name, _room(plan, x.shape[0], hello.scores))
    k = hello.scores
    if not isinstance(k, int) or not 1 <= k <= 65536:
        raise ProtocolError(f"peer {peer!r} announced {k!r} scores", party=party.name,
                            step="hello")
    check_rows(x.shape[0], plan, k, f"party {party.name!r}")
    session = None if dealer is None else ss.TargetSession(party, peer, dealer, plan,
                                                           x.shape[0], k, clock)
    net = make_net(x.shape[1], plan, init_seed)
    opt = _optimizer(net, plan)
    d = plan.dim
    xt = _tensor(x)
    losses: list[float] = []
    epoch = 0
    for epoch in range(plan.epochs):
        if session is not None:
            session.start_epoch(epoch)
        for index, rows in enumerate(batch_order(x.shape[0], plan, epoch, k)):
            b = rows.size
            with clock.timing("compute"):
                u_t = net(xt[rows])
                u = u_t.detach().numpy().astype(np.float64)
            if session is not None:
                g = session.step(u, epoch, index)
            elif keys.plain:
                with clock.timing("messaging"):
                    party.send(peer, "reps", Pair(u, u.T @ u))
                    terms = party.recv(peer, "terms")
                p_tilde = _array(getattr(terms, "first", None), (b, d), "terms", party.name)
                q_tilde = _array(getattr(terms, "second", None), (d, d), "terms", party.name)
                g = p_tilde + u @ q_tilde.T
            else:
                g = _target_encrypted(party, peer, keys, clock, u, k, plan)
            with clock.timing("compute"):
                grad = (g + 2 * plan.gamma * u) / b
                opt.zero_grad()
                u_t.backward(_tensor(grad))
                opt.step()
        with clock.timing("messaging"):
            status = party.recv(peer, "status")
        if not isinstance(status, Status) or status.epoch != epoch or not isinstance(
                status.loss, float):
            raise ProtocolError(f"peer {peer!r} sent a malformed status", party=party.name,
                                step="status")
        losses.append(float(status.loss))
        if not status.go_on:
            break
    return TargetModel(net, losses, epoch + 1, clock)


def _target_encrypted(party: Party, peer: str, keys: _Keys, clock: Clock, u: Array, k: int,
                      plan: Plan) -> Array:
    """One encrypted step of A; returns P̃ + Q̃u (b × d) in floats."""
    mine, theirs = keys.mine, keys.peer
    assert mine is not None and theirs is not None
    b, d, f = u.shape[0], plan.dim, plan.frac_bits
    with clock.timing("he"):
        u_int = maths.encode(u, f, "A's representation", f"party {party.name!r}")
        s_int = maths.encode(u.T @ u, f, "A's S", f"party {party.name!r}")
        reps = Pair(mine.to_bytes(mine.encrypt(u_int)), mine.to_bytes(mine.encrypt(s_int)))
    with clock.timing("messaging"):
        party.send(peer, "reps", reps)
        terms = party.recv(peer, "terms")
    if not isinstance(terms, Pair):
        raise ProtocolError(f"peer {peer!r} sent malformed terms", party=party.name,
                            step="terms")
    bits = _target_bits(plan)
    with clock.timing("he"):
        p_cts = _blob(theirs, terms.first, b * d, "terms", party.name)
        q_cts = _blob(theirs, terms.second, d * d, "terms", party.name)
        weights = np.array(u_int, dtype=np.int64).reshape(b, d).T  # d × b
        # Q̃ᵀ against every u_i: output (i, j) = Σ_k u_ik Q̃_jk
        q_t = _take(theirs, q_cts, [j * d + c for c in range(d) for j in range(d)])
        qu_rows = _products(theirs, q_t, d, d, weights)
        pads = _masks(theirs, b * d, bits)
        masked = theirs.add(theirs.add(p_cts, qu_rows), _encrypt_masks(theirs, pads))
    with clock.timing("messaging"):
        party.send(peer, "masked", theirs.to_bytes(masked))
        incoming = party.recv(peer, "masked")
    # B's masked values: G (K·d), [U (b·d)], loss (1)
    count = k * d + (b * d if plan.alignment == "symmetric" else 0) + 1
    with clock.timing("he"):
        cts = _blob(mine, incoming, count, "masked", party.name)
        opened = keys.decrypt(cts, _source_bits(plan, b), "masked values", peer, party.name,
                              "masked")
    with clock.timing("messaging"):
        party.send(peer, "opened", opened)
        mine_opened = party.recv(peer, "opened")
    values = _unmask(theirs, mine_opened, pads, bits, "opened", party.name, peer)
    return maths.decode(values, 2 * f, (b, d))


def _target_bits(plan: Plan) -> int:
    """|P̃_ij + Σ_k Q̃_jk u_ik| and |Σ_j Φ_cj u_ij| (inference) are below 2^this."""
    return maths.value_bits(plan.dim, plan.frac_bits)


def _source_bits(plan: Plan, rows: int) -> int:
    """B's values of a batch of ``rows`` (G, U, the loss: b·d + d² products) are below 2^this."""
    return maths.value_bits(rows * plan.dim + plan.dim ** 2, plan.frac_bits)


def _room(plan: Plan, rows: int, scores: int) -> int:
    """Plaintext bits the masked values of the plan's largest batch need (OU's check)."""
    largest = min(rows, plan.batch_size + scores)  # a last batch of <= K rows joins one
    return max(_target_bits(plan), _source_bits(plan, largest)) + heu.MASK_BITS + 1


def source(party: Party, X: Any, labels: Any, *, overlap: Any, n_classes: int,
           peer: str = "A", plan: Plan, progress: Any = None,
           init_seed: int | None = None, dealer: str | None = None) -> SourceModel:
    """Play B, the source party: features and labels of all its rows.

    Parameters
    ----------
    party
        This party's context.
    X
        B's features (N_B × p_B), standardised.
    labels
        Class codes 0 … n_classes − 1 for every row of ``X``.
    overlap
        Indices into ``X`` of the overlap rows, in the order both parties agreed.
    n_classes
        Number of classes.
    peer
        A's name.
    plan
        The shared :class:`Plan`.
    progress
        Optional callable ``(epoch, epochs, loss)`` called after every epoch.
    init_seed
        B's private seed for its initial weights and pre-training order (None: fresh
        random bits).
    dealer
        D's name, needed by ``engine="ss"`` (:mod:`islands.vfl.ftl.ss`); D must collude
        with neither party.

    Returns
    -------
    SourceModel
    """
    import torch

    owner = f"party {party.name!r}"
    plan = check_plan(plan, owner)
    x = np.asarray(X, dtype=np.float64)
    if x.ndim != 2 or not np.all(np.isfinite(x)):
        raise ValidationError(f"{owner}: X must be a finite 2-D array")
    if x.shape[0] == 0:
        raise ValidationError(f"{owner}: X has no rows")
    y = np.asarray(labels, dtype=np.int64)
    if not np.issubdtype(np.asarray(overlap).dtype, np.integer):
        raise ValidationError(f"{owner}: overlap must hold integer row indices")
    rows_o = np.asarray(overlap, dtype=np.int64)
    if y.shape != (x.shape[0],) or y.min() < 0 or y.max() >= n_classes:
        raise ValidationError(f"{owner}: labels must be {x.shape[0]} codes in "
                              f"[0, {n_classes})")
    if rows_o.ndim != 1 or rows_o.size == 0 or rows_o.min() < 0 or rows_o.max() >= x.shape[0] \
            or np.unique(rows_o).size != rows_o.size:
        raise ValidationError(f"{owner}: overlap must index distinct rows of X")
    loss = TaylorLoss(plan.loss, n_classes)
    check_rows(rows_o.size, plan, loss.scores, owner)
    _check_dealer(plan, dealer, party.name, peer)
    m = loss.curvature()
    w_all = maths.prototypes(loss, y)
    t_all = loss.targets(y)
    clock = Clock()
    keys = _Keys(plan, party.name)
    if init_seed is None:
        init_seed = secrets.randbits(62)
    net = make_net(x.shape[1], plan, init_seed)
    opt = _optimizer(net, plan)
    xt = _tensor(x)
    w_t, t_t, m_t = _tensor(w_all), _tensor(t_all), _tensor(m)
    c0 = loss.constant

    def source_loss(u_b: Any, phi_t: Any) -> Any:
        scores = u_b @ phi_t.T
        return c0 + (t_t * scores).sum(1).mean() + 0.5 * ((scores @ m_t) * scores).sum(1).mean()

    with clock.timing("compute"):
        _pretrain(net, opt, xt, y, loss, plan, init_seed)
    hello = _hello(party, peer, Hello(rows_o.size, x.shape[1], plan.text(), keys.public_key,
                                      keys.djn_base, loss.scores), clock)
    keys.attach_peer(hello, peer, party.name, _room(plan, rows_o.size, loss.scores))
    d, k = plan.dim, loss.scores
    session = None if dealer is None else ss.SourceSession(party, peer, dealer, plan,
                                                           rows_o.size, k, clock)
    epoch_losses: list[float] = []
    batch_losses: list[float] = []
    epoch, converged = 0, False
    for epoch in range(plan.epochs):
        start = len(batch_losses)
        batches = batch_order(rows_o.size, plan, epoch, k)
        if session is not None:
            session.start_epoch(epoch, len(batches))
        for index, rows in enumerate(batches):
            b = rows.size
            idx = rows_o[rows]
            with clock.timing("compute"):
                u_b_t = net(xt)
                phi_t = w_t.T @ u_b_t
                phi = phi_t.detach().numpy().astype(np.float64)
                u_b = u_b_t.detach().numpy()[idx].astype(np.float64)
                t = t_all[idx]
                p, q = maths.target_terms(phi, t, m)
                p_tilde = plan.alpha * p - 2 * plan.gamma * u_b
                q_tilde = plan.alpha * q
            u_a: Array | None
            if session is not None:
                g, u_a, fed = session.step(p_tilde, q_tilde, phi, t, m, u_b, c0, epoch, index)
            elif keys.plain:
                with clock.timing("messaging"):
                    party.send(peer, "terms", Pair(p_tilde, q_tilde))
                    reps = party.recv(peer, "reps")
                u_a = _array(getattr(reps, "first", None), (b, d), "reps", owner)
                with clock.timing("compute"):
                    g = maths.phi_gradient(t, u_a, phi, m)
                    fed = maths.batch_loss(loss, phi, t, u_a, u_b, alpha=plan.alpha,
                                           gamma=plan.gamma)
            else:
                g, u_a, fed = _source_encrypted(party, peer, keys, clock, p_tilde, q_tilde,
                                                phi, t, m, u_b, k, c0, plan)
            with clock.timing("compute"):
                grad = plan.alpha / b * (w_all @ g)
                if plan.alignment == "symmetric":
                    assert u_a is not None
                    grad[idx] += 2 * plan.gamma / b * (u_b - u_a)
                total = (u_b_t * _tensor(grad)).sum()
                if plan.source_weight:
                    total = total + plan.source_weight * source_loss(u_b_t, phi_t)
                opt.zero_grad()
                total.backward()
                opt.step()
            batch_losses.append(fed)
        epoch_losses.append(float(np.mean(batch_losses[start:])))
        go_on = epoch + 1 < plan.epochs and _improved(epoch_losses, plan.tol)
        converged = not _improved(epoch_losses, plan.tol)
        with clock.timing("messaging"):
            party.send(peer, "status", Status(epoch, epoch_losses[-1], go_on))
        if session is not None:
            session.end_epoch(epoch, go_on)
        if progress is not None:
            progress(epoch + 1, plan.epochs, epoch_losses[-1])
        if not go_on:
            break
    with torch.no_grad():
        phi_final = (w_t.T @ net(xt)).numpy().astype(np.float64)
    return SourceModel(net, phi_final, epoch_losses, batch_losses, epoch + 1, converged, clock)


def _pretrain(net: Any, opt: Any, xt: Any, y: IntArray, loss: TaylorLoss, plan: Plan,
              seed: int) -> None:
    """B-local training on its own labels, prototypes from each mini-batch."""
    if not plan.pretrain_epochs:
        return
    m_t = _tensor(loss.curvature())
    rng = np.random.default_rng(seed)
    size = max(256, plan.batch_size)
    for _ in range(plan.pretrain_epochs):
        order = rng.permutation(y.size)
        for lo in range(0, y.size, size):
            rows = order[lo:lo + size]
            yb = y[rows]
            try:
                w = _tensor(maths.prototypes(loss, yb))
            except ValidationError:  # a class absent from this batch: class means only
                sign = loss.signs(yb)
                w = _tensor(sign / np.maximum(sign.sum(axis=0), 1))
            t = _tensor(loss.targets(yb))
            u = net(xt[rows])
            scores = u @ (w.T @ u).T
            value = (t * scores).sum(1).mean() + 0.5 * ((scores @ m_t) * scores).sum(1).mean()
            opt.zero_grad()
            value.backward()
            opt.step()


def _source_encrypted(party: Party, peer: str, keys: _Keys, clock: Clock, p_tilde: Array,
                      q_tilde: Array, phi: Array, t: Array, m: Array, u_b: Array, k: int,
                      c0: float, plan: Plan) -> tuple[Array, Array | None, float]:
    """One encrypted step of B; returns G (K × d), A's rows (symmetric only), the loss."""
    mine, theirs = keys.mine, keys.peer
    assert mine is not None and theirs is not None
    owner = f"party {party.name!r}"
    b, d, f = u_b.shape[0], plan.dim, plan.frac_bits
    with clock.timing("he"):
        p_int = maths.encode(p_tilde, 2 * f, "B's terms", owner)
        q_int = maths.encode(q_tilde, f, "B's terms", owner)
        terms = Pair(mine.to_bytes(mine.encrypt(p_int)), mine.to_bytes(mine.encrypt(q_int)))
    with clock.timing("messaging"):
        party.send(peer, "terms", terms)
        reps = party.recv(peer, "reps")
    if not isinstance(reps, Pair):
        raise ProtocolError(f"peer {peer!r} sent malformed representations",
                            party=party.name, step="reps")
    symmetric = plan.alignment == "symmetric"
    with clock.timing("he"):
        u_cts = _blob(theirs, reps.first, b * d, "reps", party.name)
        s_cts = _blob(theirs, reps.second, d * d, "reps", party.name)
        # G_cj = Σ_i t_ic u_ij + Σ_l (MΦ)_cl S_lj: column j of U and S against [T; (MΦ)ᵀ]
        weights = np.vstack([
            np.array(maths.encode(t, f, "targets", owner), dtype=np.int64).reshape(b, k),
            np.array(maths.encode((m @ phi).T, f, "MΦ", owner), dtype=np.int64).reshape(d, k),
        ])
        both = _concat(theirs, [u_cts, s_cts])  # [U; S], (b + d) × d
        g_cts = _products(theirs, both, b + d, d, weights)  # row-major K × d
        # b·L = α·b·c0 + γΣ‖u^B‖² + Σ P̃_ij u_ij + Σ (Q̃/2 + γI)_jl S_jl
        loss_weights = np.array(
            maths.encode(p_tilde, f, "B's terms", owner)
            + maths.encode(q_tilde / 2 + plan.gamma * np.eye(d), f, "B's terms", owner),
            dtype=np.int64)[:, None]
        loss_ct = theirs.weighted(both, loss_weights)
        constant = plan.alpha * b * c0 + plan.gamma * float(np.sum(u_b ** 2))
        (constant_int,) = maths.encode([constant], 2 * f, "the loss", owner)
        to_open = _concat(theirs, [g_cts, *([u_cts] if symmetric else []), loss_ct])
        count = k * d + (b * d if symmetric else 0) + 1
        bits = _source_bits(plan, b)
        pads = _masks(theirs, count, bits)
        masked = theirs.add(to_open, _encrypt_masks(theirs, pads, constant_int))
    with clock.timing("messaging"):
        party.send(peer, "masked", theirs.to_bytes(masked))
        incoming = party.recv(peer, "masked")
    with clock.timing("he"):
        cts = _blob(mine, incoming, b * d, "masked", party.name)
        opened = keys.decrypt(cts, _target_bits(plan), "masked values", peer, party.name,
                              "masked")
    with clock.timing("messaging"):
        party.send(peer, "opened", opened)
        theirs_opened = party.recv(peer, "opened")
    # the constant travelled inside the last pad's encryption: remove the pads only
    values = _unmask(theirs, theirs_opened, pads, bits, "opened", party.name, peer)
    g = maths.decode(values[:k * d], 2 * f, (k, d))
    u_a = maths.decode(values[k * d:k * d + b * d], f, (b, d)) if symmetric else None
    fed = values[-1] / float(2 ** (2 * f)) / b
    return g, u_a, float(fed)


# ------------------------------------------------------------------ inference
def infer_source(party: Party, phi: Any, *, peer: str = "A", plan: Plan,
                 dealer: str | None = None) -> int:
    """B's side of inference: send ⟦Φ⟧_B, decrypt A's masked scores; returns rows served.

    A learns Φu for its rows; after d rows with independent representations it could
    solve for Φ (see the module docstring). B learns nothing about A's rows. Under
    ``engine="ss"`` the scores are one commodity product with ``dealer``
    (:func:`islands.vfl.ftl.ss.infer_source`).
    """
    plan = check_plan(plan, f"party {party.name!r}")
    _check_dealer(plan, dealer, party.name, peer)
    phi_arr = np.asarray(phi, dtype=np.float64)
    k, d = phi_arr.shape
    keys = _Keys(plan, party.name)
    with_key = Hello(0, d, plan.text(), keys.public_key, keys.djn_base, k)
    party.send(peer, "hello", with_key)
    hello = party.recv(peer, "hello")
    _check_hello(party, peer, hello, with_key.plan)
    rows = hello.rows
    if dealer is not None:
        ss.infer_source(party, phi_arr, peer=peer, dealer=dealer, plan=plan, rows=rows)
        return int(rows)
    if keys.plain:
        party.send(peer, "phi", phi_arr)
        return int(rows)
    mine = keys.mine
    assert mine is not None
    bits = _target_bits(plan)
    if isinstance(mine, heu.OuCipher):
        mine.check_room(bits + heu.MASK_BITS + 1, "the masked scores", f"party {party.name!r}")
    phi_int = maths.encode(phi_arr, plan.frac_bits, "Φ", f"party {party.name!r}")
    party.send(peer, "phi", mine.to_bytes(mine.encrypt(phi_int)))
    incoming = party.recv(peer, "masked")
    cts = _blob(mine, incoming, rows * k, "masked", party.name)
    party.send(peer, "opened", keys.decrypt(cts, bits, "masked scores", peer, party.name,
                                            "masked"))
    return int(rows)


def infer_target(party: Party, net: Any, X: Any, *, peer: str = "B", plan: Plan,
                 dealer: str | None = None) -> Array:
    """A's side of inference: the scores Φu (rows × K) for its rows ``X``.

    Under ``engine="ss"``, one commodity product with ``dealer``
    (:func:`islands.vfl.ftl.ss.infer_target`).
    """
    import torch

    plan = check_plan(plan, f"party {party.name!r}")
    _check_dealer(plan, dealer, party.name, peer)
    x = np.asarray(X, dtype=np.float64)
    with torch.no_grad():
        u = net(_tensor(x)).numpy().astype(np.float64)
    party.send(peer, "hello", Hello(x.shape[0], x.shape[1], plan.text(), None, None, 0))
    hello = party.recv(peer, "hello")
    _check_hello(party, peer, hello, plan.text())
    k, d, f = hello.scores, plan.dim, plan.frac_bits
    if dealer is not None:
        return ss.infer_target(party, u, peer=peer, dealer=dealer, plan=plan, scores=k)
    if plan.he == "none":
        phi = _array(party.recv(peer, "phi"), (k, d), "phi", party.name)
        return np.asarray(u @ phi.T)
    # A needs no key of its own here
    assert plan.he is not None  # engine="he": check_plan resolved it
    theirs = _peer_cipher(hello, peer, party.name, plan.he,
                          min_peer_key_bits(plan.key_bits, plan.insecure_keys), plan.djn)
    bits = _target_bits(plan)
    if isinstance(theirs, heu.OuCipher):
        try:
            theirs.check_room(bits + heu.MASK_BITS + 1, "the masked scores",
                              f"party {party.name!r}")
        except ValidationError as exc:
            raise ProtocolError(f"{exc} (hello from {peer!r})", party=party.name,
                                step="hello") from None
    phi_cts = _blob(theirs, party.recv(peer, "phi"), k * d, "phi", party.name)
    u_int = np.array(maths.encode(u, f, "A's representation", f"party {party.name!r}"),
                     dtype=np.int64).reshape(x.shape[0], d)
    phi_t = _take(theirs, phi_cts, [c * d + j for j in range(d) for c in range(k)])  # Φᵀ
    scores = _products(theirs, phi_t, d, k, u_int.T)  # (i, c) row-major
    pads = _masks(theirs, k * x.shape[0], bits)
    masked = theirs.add(scores, _encrypt_masks(theirs, pads))
    party.send(peer, "masked", theirs.to_bytes(masked))
    values = _unmask(theirs, party.recv(peer, "opened"), pads, bits, "opened", party.name,
                     peer)
    return maths.decode(values, 2 * f, (x.shape[0], k))
