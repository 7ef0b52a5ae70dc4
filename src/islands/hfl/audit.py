r"""Gradient leakage in horizontal FL: what the server reads from one client's upload.

APFL [1]_ §2.1 (ALGORITHMS.md §3): for a neuron j of a first dense layer
o_j = Σ_i w_ij x_i + b_j, the chain rule gives ∂L/∂w_ij = (∂L/∂o_j)·x_i and
∂L/∂b_j = ∂L/∂o_j, so

.. math:: \frac{\partial L / \partial w_{ij}}{\partial L / \partial b_j} = x_i
   \qquad \text{(eq. 9)}

whatever the loss and the layers above. A client that takes one SGD step on one sample
uploads w − lr·∇L: the server subtracts the model it sent and reads the sample's input
exactly, from any neuron the sample activates (:func:`recover_input`). With a batch,
the same ratio gives a δ-weighted mixture of the batch's inputs.

:func:`audit_gradients` runs a real federation (the roles of :mod:`islands.hfl.protocol`,
:class:`~islands.hfl.torch.learner.TorchLearner`, one full-batch SGD step per client) in which
client 1 holds one sample, once per protection, keeps the transcript, and attacks
exactly what the server received:

* ``plain`` (the weighted mean): client 1's float32 model minus the initial model the
  server sent it → the image, exactly (rounding only);
* ``secagg`` (:mod:`islands.aggregation.secagg`): client 1's upload is a masked ring vector.
  Read as the fixed-point encoding it pretends to be it is uniform garbage; the server
  also learns the weighted mean of all clients, whose update mixes every sample of the
  round. The reported error is the better of the two readings;
* ``ckks`` (:mod:`islands.aggregation.homomorphic`): ciphertexts, and only the public context
  (decrypting with it is refused). The server's best guess is nothing: x̂ = 0, error 1;
* ``dp`` (:class:`~islands.aggregation.protect.ClientDP`): the clipped, noised model is plain,
  so the attack runs on it; the noise N(0, σ²S²) per coordinate drowns the signal;
* ``ckks+collusion``: the weakness of the paper's scheme. Every client holds the same
  secret key, so a second client handing its key to the server lets it decrypt client
  1's upload as received (:func:`shared_key_attack`) and read the image again, exactly.

Only the transcript (what the server received and sent) and, for the collusion, the key
the colluding client holds are used; client 1's sample is used only to score.

References
----------
.. [1] Zhang Ze-Hui et al. "Adaptive privacy-preserving federated learning" (APFL),
   Acta Automatica Sinica 2023, §2.1 (privacy leakage, eqs. 6-9).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.aggregation.base import AggReply
from islands.aggregation.keys import KeyDeal
from islands.aggregation.protect import build_aggregator
from islands.aggregation.secagg import SecureAggregation
from islands.arrays import Array
from islands.crypto import ckks
from islands.crypto.fixedpoint import decode_fixed
from islands.crypto.mac import real_tag_count
from islands.data import load_fashion_mnist, load_sklearn
from islands.errors import DataNotFoundError, ProtocolError, ValidationError, invalid_parameter
from islands.hfl.estimator import client_seed
from islands.hfl.protocol import Task, Update, client, server
from islands.hfl.strategy import FedAvg
from islands.hfl.torch.learner import TorchLearner
from islands.hfl.torch.models import ModelSpec, ModulePool
from islands.progress import ProgressOption, check_progress, task
from islands.reporting import new_figure, save_figure, write_json
from islands.runtime import Record, Transcript, run_local
from islands.threads import torch_threads
from islands.validation import check_float, check_int, describe

__all__ = [
    "PROTECTIONS",
    "GradientAudit",
    "audit_gradients",
    "first_layer_update",
    "recover_input",
    "relative_error",
    "shared_key_attack",
]


PROTECTIONS: tuple[str, ...] = ("plain", "secagg", "ckks", "dp")
"""The protections :func:`audit_gradients` attacks (``ckks`` also reports ``ckks+collusion``)."""

_SERVER = "server"
_HIDDEN = (200,)
_FASHION_ROWS = 10_000  # rows of Fashion-MNIST's training split loaded (the sample is one)
_TIMEOUT = 300.0


# --------------------------------------------------------------------------- the attack
def recover_input(delta_w1: ArrayLike, delta_b1: ArrayLike, *,
                  min_bias: float = 1e-6) -> Array:
    r"""Recover one sample's input from a first dense layer's update (APFL §2.1, eq. 9).

    For a single sample, row j of the weight update is the bias update times the input:
    ΔW[j, :] = Δb_j·x (the update is −lr·∇L, the factor cancels in the ratio). Neurons
    the sample does not activate (ReLU-dead) have ΔW[j, :] = 0 and Δb_j = 0 and say
    nothing; every live one gives x exactly. They are combined by least squares,

    .. math:: \hat x = \arg\min_x \sum_{j\ \mathrm{live}} \lVert \Delta W_{j,:}
              - \Delta b_j x \rVert^2 = \frac{\sum_j \Delta b_j \Delta W_{j,:}}
              {\sum_j \Delta b_j^2},

    the Δb_j²-weighted mean of the per-neuron ratios ΔW[j, :]/Δb_j. Exact for one
    sample, it lets the neurons with the largest gradients (the smallest relative
    rounding error) dominate and keeps a neuron whose Δb_j is tiny and mostly rounding
    or noise from blowing the estimate up, as dividing by it alone would. For a batch it
    returns a δ-weighted mixture of the inputs; on noise it returns noise.

    Parameters
    ----------
    delta_w1 : array-like of shape (h, d)
        The first layer's weight update (after − before), one row per neuron.
    delta_b1 : array-like of shape (h,)
        The first layer's bias update.
    min_bias : float, default=1e-6
        A neuron is live when |Δb_j| > min_bias · max_k |Δb_k| (relative, so that the
        learning rate does not matter); the others are dropped.

    Returns
    -------
    ndarray of float64, shape (d,)
        The estimated input x̂.

    Raises
    ------
    ValidationError
        If the shapes disagree, a value is not finite, or no neuron is live (every
        |Δb_j| is zero: the update carries no gradient of this sample).

    Examples
    --------
    >>> x = np.array([0.5, -1.0, 2.0])
    >>> delta = np.array([0.3, 0.0, -0.1])   # ∂L/∂o_j; neuron 1 dead
    >>> recover_input(np.outer(delta, x), delta)
    array([ 0.5, -1. ,  2. ])
    """
    owner = "recover_input"
    w = np.asarray(delta_w1, dtype=np.float64)
    b = np.asarray(delta_b1, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] < 1 or w.shape[1] < 1:
        raise invalid_parameter("delta_w1", owner, "a non-empty 2-D array (neurons × inputs)",
                                describe(delta_w1))
    if b.shape != (w.shape[0],):
        raise invalid_parameter("delta_b1", owner, f"a 1-D array of length {w.shape[0]}",
                                describe(delta_b1))
    if not (np.isfinite(w).all() and np.isfinite(b).all()):
        raise ValidationError(f"{owner}: the update holds NaN or infinite values")
    threshold = check_float(min_bias, "min_bias", owner, low=0.0)
    if threshold >= 1:
        raise invalid_parameter("min_bias", owner, "a float in [0, 1)", min_bias)
    largest = float(np.max(np.abs(b)))
    if largest == 0.0:
        raise ValidationError(
            f"{owner}: no live neuron (every bias update is 0): the update carries no "
            "gradient of a sample through this layer")
    live = np.abs(b) > threshold * largest
    bl = b[live]
    out: Array = (bl @ w[live]) / float(bl @ bl)
    return out


def first_layer_update(spec: ModelSpec, before: ArrayLike, after: ArrayLike,
                       ) -> tuple[Array, Array]:
    """Slice the first dense layer's update (ΔW₁, Δb₁) out of two flat parameter vectors.

    Flat vectors follow :mod:`islands.hfl.torch.models`: ``module.parameters()`` order, each
    parameter row-major, so the first layer's weight (h × d, h neurons, d inputs) comes
    first and its bias (h) right after.

    Parameters
    ----------
    spec : ModelSpec
        ``"mlp"`` (h = the first hidden width, or the outputs without hidden layers) or
        ``"linear"`` (h = the outputs).
    before, after : array-like of shape (spec.n_params(),)
        The model the round started from and the model after the local step.

    Returns
    -------
    delta_w1 : ndarray of float64, shape (h, d)
    delta_b1 : ndarray of float64, shape (h,)

    Raises
    ------
    ValidationError
        If ``spec`` is a CNN (its first layer is a convolution) or a vector has the
        wrong length.
    """
    owner = "first_layer_update"
    if not isinstance(spec, ModelSpec) or spec.kind not in ("mlp", "linear"):
        raise invalid_parameter("spec", owner, "a ModelSpec of kind 'mlp' or 'linear' (the "
                                "first layer must be dense)", describe(spec))
    n = spec.n_params()
    vecs = []
    for name, value in (("before", before), ("after", after)):
        arr = np.asarray(value)
        if arr.shape != (n,) or arr.dtype.kind not in "fiu":
            raise invalid_parameter(name, owner, f"a 1-D float vector of length {n}",
                                    describe(value))
        vecs.append(arr.astype(np.float64))
    d = spec.input_size
    h = spec.hidden[0] if spec.kind == "mlp" and spec.hidden else spec.n_outputs
    delta = vecs[1] - vecs[0]
    return delta[: h * d].reshape(h, d), delta[h * d: h * d + h]


def shared_key_attack(secret_context: Any, upload: Sequence[bytes], length: int) -> Array:
    """Decrypt another client's CKKS upload with a colluding client's copy of the key.

    APFL's clients share one CKKS key pair (:mod:`islands.aggregation.keys`), so the secret
    context any client holds opens every other client's ``Enc(w_k)`` that the server
    received: the server, given one client's key, sees every model in the clear.

    Parameters
    ----------
    secret_context : tenseal.Context or bytes
        The colluding client's secret context (or its serialisation).
    upload : sequence of bytes
        The ciphertext chunks of the victim's upload, as the server received them.
    length : int
        The model's number of parameters.

    Returns
    -------
    ndarray of float64, shape (length,)
        The victim's model w_k.
    """
    ctx = (ckks.load_context(bytes(secret_context), secret=True)
           if isinstance(secret_context, bytes | bytearray) else secret_context)
    return ckks.decrypt_vector(ctx, list(upload), length)


def relative_error(estimate: ArrayLike, truth: ArrayLike) -> float:
    """‖x̂ − x‖ / ‖x‖ (1.0 for the guess x̂ = 0)."""
    x = np.asarray(truth, dtype=np.float64)
    norm = float(np.linalg.norm(x))
    if norm == 0.0:
        raise ValidationError("relative_error: the true input is all zeros")
    return float(np.linalg.norm(np.asarray(estimate, dtype=np.float64) - x) / norm)


# --------------------------------------------------------------------------- the server's view
def _message(records: Sequence[Record], *, sender: str, receiver: str, tag: str,
             kind: type, where: Any = None) -> Any:
    for r in records:
        if r.sender == sender and r.receiver == receiver and r.tag == tag:
            payload = r.payload
            if isinstance(payload, kind) and (where is None or where(payload)):
                return payload
    raise ValidationError(f"the transcript holds no {kind.__name__} {sender!r} → {receiver!r} "
                          f"on {tag!r}; run the federation with keep_payloads=True")


def _server_view(transcript: Transcript, victim: str) -> dict[str, Any]:
    """Return what the server sent the victim in round 1 and what it got back."""
    sent = transcript.sent_by(_SERVER)
    got = transcript.received_by(_SERVER)
    task = _message(sent, sender=_SERVER, receiver=victim, tag="task", kind=Task,
                    where=lambda t: t.round == 1)
    update = _message(got, sender=victim, receiver=_SERVER, tag="update", kind=Update,
                      where=lambda u: u.round == 1)
    return {"initial": np.asarray(task.params, dtype=np.float64), "weight": float(task.weight),
            "upload": update.payload}


def _ckks_public_context(transcript: Transcript, dealer: str) -> bytes:
    """Return the public CKKS context the dealer gave the server (its only key)."""
    reply = _message(transcript.received_by(_SERVER), sender=dealer, receiver=_SERVER,
                     tag="agg", kind=AggReply, where=lambda a: a.phase == "ckks-deal")
    public = reply.body.public if isinstance(reply.body, KeyDeal) else None
    if not isinstance(public, bytes):
        raise ValidationError("the CKKS dealer's answer holds no public context")
    return public


# --------------------------------------------------------------------------- the federation
def _load_data(dataset: str | None, need: int) -> tuple[Array, NDArray[np.int64], str,
                                                        tuple[int, int], str | None]:
    note = None
    if dataset in (None, "fashion_mnist"):
        try:
            ds = load_fashion_mnist(split="train", n_samples=need)
        except DataNotFoundError:
            if dataset == "fashion_mnist":
                raise
            ds = load_sklearn("digits")
            note = ("Fashion-MNIST was not found: used scikit-learn's digits (8×8, pixels "
                    "0-16) instead")
    elif dataset == "digits":
        ds = load_sklearn("digits")
    else:
        raise invalid_parameter("dataset", "audit_gradients",
                                "None, 'fashion_mnist' or 'digits'", describe(dataset))
    assert ds.image_shape is not None and ds.classes is not None
    X = np.asarray(ds.X, dtype=np.float64).reshape(ds.n_samples, -1)
    return X, np.asarray(ds.y, dtype=np.int64), ds.name, ds.image_shape, note


def _federate(spec: ModelSpec, parts: list[tuple[Array, NDArray[np.int64]]], names: list[str],
              aggregator: Any, *, seed: int, lr: float) -> tuple[Transcript, dict[str, Any],
                                                                 Any]:
    """Run one round of FedAvg: every client one full-batch SGD step, payloads kept."""
    strategy = FedAvg(local_steps=1, batch_size=None, lr=lr, momentum=0.0,
                      aggregator=aggregator)
    pool = ModulePool(spec)
    halves = {name: aggregator.client_half() for name in names}
    roles: dict[str, Any] = {_SERVER: partial(
        server, clients=names, strategy=strategy, initial=spec.initial_params(seed),
        epochs=1, client_timeout=_TIMEOUT, send_final=False)}
    for k, (name, (X, y)) in enumerate(zip(names, parts, strict=True)):
        learner = TorchLearner(spec, X.astype(np.float32), y, seed=client_seed(seed, k),
                               pool=pool)
        roles[name] = partial(client, server=_SERVER, learner=learner, aggregator=aggregator,
                              half=halves[name], task_timeout=_TIMEOUT)
    transcript = Transcript(keep_payloads=True)
    with torch_threads(1):
        run = run_local(roles, timeout=_TIMEOUT, transcript=transcript, blas_threads=None)
    return run.transcript, halves, run.results[_SERVER]


def _check_protections(protections: Sequence[str]) -> list[str]:
    if isinstance(protections, str):
        protections = [p.strip() for p in protections.split(",") if p.strip()]
    names = list(dict.fromkeys(protections))
    bad = [p for p in names if p not in PROTECTIONS]
    if not names or bad:
        raise invalid_parameter("protections", "audit_gradients",
                                f"a non-empty subset of {PROTECTIONS}", describe(protections))
    return names


@dataclass(frozen=True)
class GradientAudit:
    """What :func:`audit_gradients` found; :meth:`to_json` is its ``audit.json``.

    Attributes
    ----------
    errors
        Protection → ‖x̂ − x‖/‖x‖ of the server's best attack (0 = exact, 1 = no better
        than guessing 0).
    views
        Protection → the error of each reading the server has.
    notes
        Why, per protection (and ``"dataset"`` when digits stood in for Fashion-MNIST).
    dataset, sample_index, label, image_shape
        The image client 1 held.
    skipped
        Protections not run (``ckks`` without TenSEAL).
    reference
        ``round_mean_image``: the error of the mean image of the round's samples, which
        the server does not have (a yardstick for "looks like an average image").
    setting
        The federation: model, clients, rows, learning rate, seed, DP settings.
    figure, json
        The files written when an output folder was given (``figure`` is None without
        matplotlib), else None.
    """

    errors: dict[str, float]
    views: dict[str, dict[str, float]]
    notes: dict[str, str]
    dataset: str
    sample_index: int
    label: int
    image_shape: list[int]
    skipped: list[str]
    reference: dict[str, float]
    setting: dict[str, Any]
    figure: str | None = None
    json: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return ``audit.json``: ``figure`` and ``json`` only when files were written."""
        out: dict[str, Any] = {
            "errors": self.errors, "views": self.views, "notes": self.notes,
            "dataset": self.dataset, "sample_index": self.sample_index, "label": self.label,
            "image_shape": self.image_shape, "skipped": self.skipped,
            "reference": self.reference, "setting": self.setting}
        if self.json is not None:
            out.update(figure=self.figure, json=self.json)
        return out

    def __getitem__(self, key: str) -> Any:
        raise TypeError(f"audit_gradients returns a GradientAudit now: read .{key} "
                        f"(or .to_json()[{key!r}]) instead of [{key!r}]")


def audit_gradients(
    out: str | Path | None = None,
    *,
    protections: Sequence[str] = PROTECTIONS,
    clients: int = 3,
    seed: int = 0,
    sample: int | None = None,
    dp_clip: float = 1.0,
    dp_noise: float = 1.0,
    dataset: str | None = None,
    other_rows: int = 32,
    lr: float = 0.1,
    progress: ProgressOption = None,
) -> GradientAudit:
    """Run APFL §2.1's attack on a real federation, once per protection, from the server.

    ``clients`` clients train an MLP d-200-10 (784-200-10 on Fashion-MNIST) with FedAvg
    for one round: each takes one full-batch SGD step (learning rate ``lr``, no
    momentum) from the seeded initial model. Client 1 holds one sample; the others
    ``other_rows`` each. For each protection the server attacks exactly what it received
    from client 1 (and the aggregate, where it learns one); see the module docstring.

    Parameters
    ----------
    out : path, optional
        Folder for ``gradient_leakage.png`` (the sample and each recovery side by side)
        and ``audit.json`` (the result); created if missing.
    protections : sequence of str, default=("plain", "secagg", "ckks", "dp")
        Which to run; ``"ckks"`` also reports ``"ckks+collusion"``. ``"ckks"`` is
        skipped, with a note, when TenSEAL is not installed.
    clients : int, default=3
        Clients in the federation (at least 3).
    seed : int, default=0
        Seeds the choice of samples, the initial model and the protocols' randomness
        that is seeded (keys and masks come from the OS's generator).
    sample : int, optional
        Row of the training split client 1 holds (default: drawn from ``seed``).
    dp_clip, dp_noise : float, default=1.0
        S and σ of client-level DP: clip the update to L2 ≤ S, add N(0, σ²S²).
    dataset : {None, "fashion_mnist", "digits"}, default=None
        None: Fashion-MNIST's training split, or scikit-learn's digits when it is not
        installed (said in ``notes["dataset"]``).
    other_rows : int, default=32
        Training rows of every other client.
    lr : float, default=0.1
        The local learning rate.

    progress : bool or callable, optional
        One step per protection (``True``: a bar; a callable gets each
        :class:`~islands.progress.ProgressUpdate`).

    Returns
    -------
    GradientAudit
        The errors, the readings and notes per protection, the sample and the setting;
        with ``out``, the files written.

    Raises
    ------
    ValidationError
        On a bad argument.
    DataNotFoundError
        If ``dataset="fashion_mnist"`` and it is not installed.
    ProtocolError
        If a party of a federation failed.
    """
    owner = "audit_gradients"
    progress = check_progress(progress, owner)
    names_wanted = _check_protections(protections)
    clients = check_int(clients, "clients", owner, low=3)
    seed = check_int(seed, "seed", owner, low=0)
    other_rows = check_int(other_rows, "other_rows", owner, low=1)
    dp_clip = check_float(dp_clip, "dp_clip", owner, low=0.0, low_inclusive=False)
    dp_noise = check_float(dp_noise, "dp_noise", owner, low=0.0, low_inclusive=False)
    lr = check_float(lr, "lr", owner, low=0.0, low_inclusive=False)
    if sample is not None:
        sample = check_int(sample, "sample", owner, low=0)

    need = max(_FASHION_ROWS, (sample or 0) + 1)
    X, y, ds_name, image_shape, data_note = _load_data(dataset, need)
    n, d = X.shape
    others_total = (clients - 1) * other_rows
    if sample is not None and sample >= n:
        raise invalid_parameter("sample", owner, f"an int in [0, {n})", sample)
    if others_total + 1 > n:
        raise ValidationError(f"{owner}: {clients - 1} clients × {other_rows} rows do not fit "
                              f"in the {n} rows of {ds_name}")
    rng = np.random.default_rng([seed, 0x6772])
    index = int(rng.integers(n)) if sample is None else sample
    rest = rng.permutation(np.delete(np.arange(n), index))[:others_total]
    rows = [np.array([index])] + [np.sort(rest[k * other_rows:(k + 1) * other_rows])
                                  for k in range(clients - 1)]
    parts = [(X[r], y[r]) for r in rows]
    names = [f"client-{k + 1}" for k in range(clients)]
    victim, colluder = names[0], names[1]
    x = X[index]
    spec = ModelSpec("mlp", (d,), 10, hidden=_HIDDEN)
    dim = spec.n_params()

    errors: dict[str, float] = {}
    views: dict[str, dict[str, float]] = {}
    notes: dict[str, str] = {}
    images: dict[str, Array] = {}
    shown_view: dict[str, str] = {}  # which reading the figure shows, where there are two
    skipped: list[str] = []
    if data_note is not None:
        notes["dataset"] = data_note

    def attack(before: Array, after: Array) -> tuple[Array, float]:
        w1, b1 = first_layer_update(spec, before, after)
        guess = recover_input(w1, b1)
        return guess, relative_error(guess, x)

    with task(progress, "audit gradients", len(names_wanted), owner=owner) as running:
        for done, name in enumerate(names_wanted):
            running.update(done, f"{name}: a federation, then the server's attack")
            if name == "ckks" and importlib.util.find_spec("tenseal") is None:
                skipped.append("ckks")
                notes["ckks"] = "skipped: TenSEAL is not installed"
                continue
            if name == "plain":
                agg = build_aggregator([])
            elif name == "dp":
                agg = build_aggregator(["dp"], {"dp": {"clip": dp_clip,
                                                       "noise_multiplier": dp_noise}})
            else:
                agg = build_aggregator([name])
            transcript, halves, result = _federate(spec, parts, names, agg, seed=seed, lr=lr)
            view = _server_view(transcript, victim)
            before, upload = view["initial"], view["upload"]

            if name in ("plain", "dp"):
                guess, err = attack(before, np.asarray(upload, dtype=np.float64))
                errors[name], images[name] = err, guess
                views[name] = {"upload": err}
                notes[name] = (
                    "client 1's model in the clear minus the initial model: one sample's "
                    "gradient, read exactly by eq. 9" if name == "plain" else
                    f"the clipped (S = {dp_clip:g}) and noised (σ = {dp_noise:g}: N(0, "
                    f"{(dp_noise * dp_clip) ** 2:g}) per coordinate) update, attacked as it came")
            elif name == "secagg":
                assert isinstance(agg, SecureAggregation)
                frac_bits = agg.frac_bits

                masked = np.asarray(upload)
                if masked.dtype != np.uint64:
                    raise ProtocolError("the secure-aggregation upload is not a ring vector",
                                        party=_SERVER, step="update")
                read = decode_fixed(masked, frac_bits=frac_bits) / view["weight"]
                single, e_single = attack(before, read)
                if result.params is None:  # pragma: no cover - secagg always reveals the mean
                    raise ProtocolError("secure aggregation revealed no mean", party=_SERVER)
                mixed, e_mixed = attack(before, np.asarray(result.params, dtype=np.float64))
                views[name] = {"single_upload": e_single, "aggregate": e_mixed}
                errors[name] = min(e_single, e_mixed)
                images[name] = single if e_single <= e_mixed else mixed
                shown_view[name] = "its upload" if e_single <= e_mixed else "the mean"
                notes[name] = (
                    f"client 1's upload is masked: read as fixed point (f = {frac_bits}) and "
                    f"divided by its weight p = {view['weight']:.3g} it is uniform garbage "
                    f"(error {e_single:.3g}); the mean the server learns mixes all "
                    f"{1 + others_total} samples of the round (error {e_mixed:.3g})")
            else:  # ckks
                public = ckks.load_context(_ckks_public_context(transcript, victim), secret=False)
                try:
                    ckks.decrypt_vector(public, list(upload), dim)
                except ValidationError as exc:
                    refused = str(exc)
                else:  # pragma: no cover - would be a broken CKKS layer
                    raise ProtocolError("the server's public CKKS context decrypted an upload",
                                        party=_SERVER)
                errors["ckks"], images["ckks"] = 1.0, np.zeros_like(x)
                views["ckks"] = {"ciphertexts": 1.0}
                notes["ckks"] = (
                    f"the server holds {len(upload)} ciphertexts and the public context only; "
                    f"decrypting is refused ({refused}); its best guess is x̂ = 0 (error 1)")
                # an upload ends with the client's MAC tags (crypto.mac.real_tag_count)
                after = shared_key_attack(halves[colluder].context, upload,
                                          dim + real_tag_count(dim))[:dim]
                guess, err = attack(before, after)
                errors["ckks+collusion"], images["ckks+collusion"] = err, guess
                views["ckks+collusion"] = {"decrypted_upload": err}
                notes["ckks+collusion"] = (
                    f"{colluder} hands the server its copy of the shared CKKS secret key; the "
                    "server decrypts client 1's upload as it received it and reads the image")

    report = GradientAudit(
        errors=errors, views=views, notes=notes, dataset=ds_name, sample_index=index,
        label=int(y[index]), image_shape=list(image_shape), skipped=skipped,
        # not the server's: what "an average image" scores, to read errors near it by
        reference={"round_mean_image": relative_error(
            np.concatenate([X[r] for r in rows]).mean(axis=0), x)},
        setting={
            "model": spec.describe(), "clients": clients,
            "rows": [len(r) for r in rows], "lr": lr, "momentum": 0.0,
            "local_steps": 1, "batch": "full", "seed": seed,
            "dp": {"clip": dp_clip, "noise_multiplier": dp_noise},
            "input_norm": float(np.linalg.norm(x)),
        })
    if out is not None:
        report = _write(Path(out), report, x, images, shown_view, image_shape)
    return report


# --------------------------------------------------------------------------- outputs
_ORDER = ("plain", "secagg", "ckks", "ckks+collusion", "dp")


def _write(out: Path, report: GradientAudit, x: Array, images: dict[str, Array],
           shown_view: dict[str, str], image_shape: tuple[int, int]) -> GradientAudit:

    out.mkdir(parents=True, exist_ok=True)
    figure = None
    if importlib.util.find_spec("matplotlib") is not None:
        figure = str(_figure(out / "gradient_leakage.png", report, x, images, shown_view,
                             image_shape))
    json_path = out / "audit.json"
    written = replace(report, figure=figure, json=str(json_path))
    write_json(json_path, written.to_json())
    return written


def _figure(path: Path, report: GradientAudit, x: Array, images: dict[str, Array],
            shown_view: dict[str, str], image_shape: tuple[int, int]) -> Path:

    shown = [k for k in _ORDER if k in images]
    cols = 1 + len(shown)
    fig = new_figure(width=1.9 * cols, height=2.5)
    axes = fig.subplots(1, cols, squeeze=False)[0]
    lo, hi = float(x.min()), float(x.max())
    panels = [("original", f"{report.dataset} #{report.sample_index}", x)]
    panels += [(k if k not in shown_view else f"{k}: {shown_view[k]}",
                f"error {report.errors[k]:.2g}", images[k]) for k in shown]
    for ax, (title, sub, img) in zip(axes, panels, strict=True):
        ax.imshow(np.clip(img, lo, hi).reshape(image_shape), cmap="gray", vmin=lo, vmax=hi)
        ax.set_title(f"{title}\n{sub}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("What the server recovers from one client's one-sample update "
                 "(APFL §2.1)", fontsize=9)
    return save_figure(fig, path)
