r"""APFL's chaos permutation: shuffle model coordinates by a logistic-map orbit.

APFL [1]_ (§1.2 and §3.1) borrows a scrambling step from chaotic image encryption [2]_:
before CKKS encryption every client permutes its weight vector ``w`` (|w| = n) the same
way, so that the server, which aggregates coordinate by coordinate, never needs to know
which coordinate is which. The permutation comes from the logistic map

.. math:: x_{i+1} = \lambda \, x_i \, (1 - x_i), \qquad x_0 \in (0, 1),
   \quad 3.56994 < \lambda \le 4,

the parameter range the paper gives for the chaotic regime (eq. 5). The clients agree
on ``(x₀, λ)`` — a :class:`ChaosKey` — over a channel the server cannot read; each one
generates ``R_chaos = x_1 … x_n`` (the key itself, ``x₀``, is not part of the sequence:
the paper generates "as many random numbers as there are weights" from the initial
state), takes ``Index = argsort(R_chaos)`` ascending, and uploads ``w[Index]``. Because
every client uses the same ``Index``, ``Σ p_k · w_k[Index] = (Σ p_k · w_k)[Index]``
exactly, and after decryption the clients undo the shuffle with :func:`unpermute`.

Reproducibility across hosts. Every client must derive the *same* permutation, so the
recurrence is specified to the bit: ``x ← (λ·x)·(1 − x)`` in IEEE-754 binary64 with
round-to-nearest, evaluated in that order, no fused multiply–add (what CPython's float
arithmetic does on every platform it supports). Ties in ``R_chaos`` are rejected (see
below), so the ascending order is unique and any correct sort gives the same ``Index``.

Degenerate keys. The interval (3.56994, 4] is not chaotic everywhere: it is threaded
with periodic windows (around λ ≈ 3.63, 3.74, 3.83, ...) where the orbit is attracted to
a cycle, and in binary64 it then repeats values *exactly*. On 400 keys drawn uniformly
with λ in (3.57, 4], 12.5% had a repeating orbit within 20,000 steps, every one of them
with a negative Lyapunov exponent. Some points degenerate at once (x₀ = 0.5, λ = 4 gives
1, 0, 0, ...; x₀ = 0.75, λ = 4 is a fixed point). A repeated value means ties in the
sort, i.e. a permutation that is not a function of the key alone but of the sort
algorithm, and a short cycle means very little mixing; :func:`permutation` therefore
raises :class:`~islands.errors.ValidationError` and asks for another key, and
:func:`generate_chaos_key` only returns keys whose orbit passes a 65,536-step probe
(no repeats, Lyapunov exponent ≥ 0.1).

What the permutation does **not** do. It is obfuscation, not encryption:

* it hides coordinates from the server only — every client knows the key, so a client
  (or anyone a client leaks the key to) reads any permuted vector in the clear;
* it does not hide the multiset of values: without CKKS on top, the server sees each
  client's weights in a scrambled order, i.e. their sorted values, their histogram,
  norms and every order statistic; only the position ↔ neuron mapping is hidden;
* the logistic map is not a cryptographic PRG (its orbits have structure: an invariant
  density, short-range correlation, windows), and (x₀, λ) is at most ~106 bits of key.

Use it, as the paper does, underneath CKKS (:mod:`islands.crypto.ckks`), where the
ciphertext is what protects values from the server.

Timings. The paper (Table 1) reports generating the chaotic sequence in 12.05 ms /
25.50 ms / 0.40 s for 500 / 2000 / 54,000 parameters (MATLAB called from Python).
Here (2-core AMD EPYC VM shared with other jobs, CPython 3.11, numpy 2.4, best of 7):
:func:`logistic_sequence` takes 0.05 ms / 0.17 ms / 4.8 ms, :func:`permutation`
(sequence, argsort, tie check; uncached) 0.07 ms / 0.23 ms / 6.4 ms, and :func:`permute`
or :func:`unpermute` of 54,000 float32 values 0.25 ms (most of it checking that the
index is a permutation). :func:`generate_chaos_key` takes about 8 ms (1.17 draws of a
65,536-step probe on average).

Why hand-written: the recurrence is a data-dependent sequential loop that numpy cannot
vectorise (an element-wise numpy loop is 3× *slower* than plain floats, ~15 ms for
54,000), and no installed library offers it. The loop below runs on Python floats,
unrolled eight steps per iteration (5.0 ms for 54,000 against 6.1 ms for the plain
loop), which is also the form whose rounding is easiest to specify.

Caching. :func:`permutation` keeps the last few permutations in an LRU cache keyed on
``(key, n)`` (8 entries), so a client pays the ~7 ms once per run, not once per round.
The cache holds secret-derived data in process memory for the life of the process (or
until :func:`clear_permutation_cache`); that is no worse than the :class:`ChaosKey` the
client holds anyway. Cached arrays are read-only: copy before modifying.

References
----------
.. [1] Zhang Y., et al. "Adaptive privacy-preserving federated learning" (APFL), Acta
   Automatica Sinica, 2023 (in Chinese). §1.2 (logistic map, eq. 5), §3.1 (scrambling).
.. [2] Z. H. Zhang, F. Yao, T. G. Gao. "A hybrid image encryption algorithm based on
   chaos system and simplified advanced encryption system." IJMDEM 11(4), 2020.
.. [3] R. M. May. "Simple mathematical models with very complicated dynamics." Nature
   261, 1976.
"""

from __future__ import annotations

import functools
import secrets
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_int, describe

__all__ = [
    "LAMBDA_MIN",
    "ChaosKey",
    "clear_permutation_cache",
    "generate_chaos_key",
    "logistic_sequence",
    "permutation",
    "permute",
    "unpermute",
]

LAMBDA_MIN = 3.56994
"""λ must exceed this (APFL eq. 5: the onset of chaos, Feigenbaum's point ≈ 3.569946)."""

_KEY_BYTES = struct.Struct("<dd")
_GEN_LAMBDA_LOW = 3.57  # generate_chaos_key draws λ in (3.57, 4]
_PROBE_STEPS = 65_536  # generate_chaos_key checks this much of the orbit
_MIN_LYAPUNOV = 0.1  # ... and wants at least this Lyapunov exponent (ln 2 ≈ 0.693 at λ = 4)
_MAX_TRIES = 1000
_CACHE_SIZE = 8


def _check_real(value: Any, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise invalid_parameter(name, "ChaosKey", "a real number", describe(value))
    return float(value)


@dataclass(frozen=True)
class ChaosKey:
    """The shared secret of the chaos permutation: the logistic map's ``(x₀, λ)``.

    All clients of one federation hold the same key; the server must not. ``repr`` and
    ``str`` do not show the values.

    Parameters
    ----------
    x0
        Initial state, in the open interval (0, 1).
    lam
        Map parameter λ, in (3.56994, 4] (APFL eq. 5).

    Raises
    ------
    ValidationError
        If ``x0`` or ``lam`` is not a real number in its range (NaN included).
    """

    x0: float = field(repr=False)
    lam: float = field(repr=False)

    def __post_init__(self) -> None:
        x0 = _check_real(self.x0, "x0")
        lam = _check_real(self.lam, "lam")
        if not 0.0 < x0 < 1.0:  # False for NaN
            raise invalid_parameter("x0", "ChaosKey", "a float in the open interval (0, 1)", x0)
        if not LAMBDA_MIN < lam <= 4.0:
            raise invalid_parameter("lam", "ChaosKey", f"a float in ({LAMBDA_MIN}, 4]", lam)
        object.__setattr__(self, "x0", x0)
        object.__setattr__(self, "lam", lam)

    def __repr__(self) -> str:
        return "ChaosKey(<secret>)"

    __str__ = __repr__

    def to_bytes(self) -> bytes:
        """Serialise the key as 16 bytes (two little-endian binary64), for key dealing."""
        return _KEY_BYTES.pack(self.x0, self.lam)

    @classmethod
    def from_bytes(cls, data: bytes) -> ChaosKey:
        """Inverse of :meth:`to_bytes`; validates the values.

        Raises
        ------
        ValidationError
            If ``data`` is not 16 bytes or holds an invalid key.
        """
        if not isinstance(data, (bytes, bytearray)) or len(data) != _KEY_BYTES.size:
            got = (
                f"{len(data)} bytes"
                if isinstance(data, (bytes, bytearray))
                else type(data).__name__
            )
            raise invalid_parameter("data", "ChaosKey.from_bytes", "16 bytes", got)
        x0, lam = _KEY_BYTES.unpack(bytes(data))
        return cls(x0, lam)


def _orbit(x0: float, lam: float, n: int) -> list[float]:
    """x_1 … x_n of the logistic map, each step computed as ``(lam * x) * (1.0 - x)``."""
    out: list[float] = []
    extend = out.extend
    x = x0
    for _ in range(n >> 3):  # eight steps per iteration: ~18% less interpreter overhead
        a = lam * x * (1.0 - x)
        b = lam * a * (1.0 - a)
        c = lam * b * (1.0 - b)
        d = lam * c * (1.0 - c)
        e = lam * d * (1.0 - d)
        f = lam * e * (1.0 - e)
        g = lam * f * (1.0 - f)
        x = lam * g * (1.0 - g)
        extend((a, b, c, d, e, f, g, x))
    for _ in range(n & 7):
        x = lam * x * (1.0 - x)
        out.append(x)
    return out


def _check_key(key: Any, owner: str) -> ChaosKey:
    if not isinstance(key, ChaosKey):
        raise invalid_parameter("key", owner, "a ChaosKey", type(key).__name__)
    return key


def logistic_sequence(key: ChaosKey, n: int) -> NDArray[np.float64]:
    """Generate the chaotic sequence ``R_chaos = x_1 … x_n`` of APFL (eq. 5), x₀ excluded.

    Parameters
    ----------
    key
        The shared :class:`ChaosKey` ``(x₀, λ)``.
    n
        Length, an int >= 0.

    Returns
    -------
    ndarray of float64, shape (n,)
        ``x_{i+1} = (λ·x_i)·(1 − x_i)`` in binary64, bit-for-bit the same on every host.

    Raises
    ------
    ValidationError
        If ``key`` is not a :class:`ChaosKey` or ``n`` is not an int >= 0.
    """
    key = _check_key(key, "logistic_sequence")
    count = check_int(n, "n", "logistic_sequence", low=0)
    return np.array(_orbit(key.x0, key.lam, count), dtype=np.float64)


def _degenerate(n: int) -> ValidationError:
    return ValidationError(
        f"permutation: the chaos key's orbit degenerates within {n} steps (it repeats a "
        "value or reaches 0 or 1: λ lies in a periodic window or (x₀, λ) is a special "
        "point such as x₀ = 0.5, λ = 4), so it defines no permutation; choose another "
        "key, e.g. generate_chaos_key()"
    )


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _cached_permutation(key: ChaosKey, n: int) -> NDArray[np.int64]:
    seq = np.array(_orbit(key.x0, key.lam, n), dtype=np.float64)
    index = np.argsort(seq).astype(np.int64, copy=False)
    ordered = seq[index]
    # ties (a repeated x_i means the orbit entered a cycle) or a value reaching 0 or 1
    if n and (ordered[0] <= 0.0 or ordered[-1] >= 1.0 or np.any(ordered[1:] == ordered[:-1])):
        raise _degenerate(n)
    index.flags.writeable = False
    return index


def permutation(key: ChaosKey, n: int) -> NDArray[np.int64]:
    """APFL's ``Index``: the ascending argsort of :func:`logistic_sequence`.

    The sequence must have no repeated value (ties would make the order depend on the
    sort algorithm, and a repeat means the orbit is cycling), so the result is the
    unique ascending order, identical on every host and numpy version. Results are
    cached per ``(key, n)`` (see the module docstring).

    Parameters
    ----------
    key
        The shared :class:`ChaosKey`.
    n
        Vector length, an int >= 0.

    Returns
    -------
    ndarray of int64, shape (n,), read-only
        A permutation of ``0 … n−1``: ``values[index]`` is the permuted vector.

    Raises
    ------
    ValidationError
        If the orbit repeats a value or reaches 0 or 1 within ``n`` steps (choose
        another key), or the arguments are invalid.
    """
    key = _check_key(key, "permutation")
    count = check_int(n, "n", "permutation", low=0)
    return _cached_permutation(key, count)


def clear_permutation_cache() -> None:
    """Drop every cached permutation (they are derived from secret keys)."""
    _cached_permutation.cache_clear()


def _lyapunov(lam: float, seq: NDArray[np.float64]) -> float:
    """Estimate the Lyapunov exponent, mean of ln|f'(x_i)| = ln|λ(1 − 2x_i)|, of an orbit."""
    with np.errstate(divide="ignore"):
        return float(np.mean(np.log(np.abs(lam * (1.0 - 2.0 * seq)))))


def _random_unit() -> float:
    """Draw a uniform float k·2^-53 in (0, 1), k from the OS CSPRNG (0 is redrawn)."""
    while True:
        k = secrets.randbits(53)
        if k:
            return k * 2.0**-53


def generate_chaos_key() -> ChaosKey:
    """Draw a fresh :class:`ChaosKey` from the operating system's CSPRNG.

    ``x₀ = k·2^-53`` for a uniform 53-bit ``k ≠ 0`` (so x₀ ∈ (0, 1)) and
    ``λ = 4 − u·0.43`` for a uniform 53-bit fraction ``u ∈ [0, 1)`` (so λ ∈ (3.57, 4]),
    both from :mod:`secrets`, never numpy. Keys whose first 65,536 steps repeat a value,
    leave (0, 1) or have a Lyapunov exponent below 0.1 (periodic windows, the weakly
    chaotic edge near 3.57) are redrawn, about one draw in seven.

    Returns
    -------
    ChaosKey
        A key for which :func:`permutation` succeeds for every ``n <= 65536``.
    """
    for _ in range(_MAX_TRIES):
        x0 = _random_unit()
        lam = 4.0 - (secrets.randbits(53) * 2.0**-53) * (4.0 - _GEN_LAMBDA_LOW)
        seq = np.array(_orbit(x0, lam, _PROBE_STEPS), dtype=np.float64)
        ordered = np.sort(seq)
        if (
            ordered[0] > 0.0
            and ordered[-1] < 1.0
            and not np.any(ordered[1:] == ordered[:-1])
            and _lyapunov(lam, seq) >= _MIN_LYAPUNOV
        ):
            return ChaosKey(x0, lam)
    raise RuntimeError(  # pragma: no cover - probability ~0.14**1000
        "generate_chaos_key: no chaotic key found; the CSPRNG looks broken"
    )


def _check_index(index: Any, n: int, owner: str) -> NDArray[np.int64]:
    idx = np.asarray(index)
    if idx.ndim != 1 or idx.dtype.kind not in "iu" or idx.size != n:
        raise invalid_parameter(
            "index", owner, f"a 1-D integer permutation of length {n}", describe(idx)
        )
    if n and (
        int(idx.min()) < 0 or int(idx.max()) >= n or not np.all(np.bincount(idx, minlength=n) == 1)
    ):
        raise invalid_parameter("index", owner, f"a permutation of 0 … {n - 1}", describe(idx))
    return idx.astype(np.int64, copy=False)


def _check_values(values: ArrayLike, owner: str) -> NDArray[Any]:
    arr = np.asarray(values)
    if arr.ndim == 0:
        raise invalid_parameter("values", owner, "an array with at least one axis", arr)
    return arr


def permute(values: ArrayLike, index: ArrayLike) -> NDArray[Any]:
    """Scramble ``values`` along its first axis: ``values[index]``.

    Parameters
    ----------
    values
        Array whose first axis has length ``len(index)``; dtype is kept.
    index
        A permutation, normally from :func:`permutation`.

    Returns
    -------
    ndarray
        A new array ``values[index]``.

    Raises
    ------
    ValidationError
        If ``index`` is not a permutation of ``0 … len(values)−1``.
    """
    arr = _check_values(values, "permute")
    idx = _check_index(index, arr.shape[0], "permute")
    out: NDArray[Any] = arr[idx]
    return out


def unpermute(values: ArrayLike, index: ArrayLike) -> NDArray[Any]:
    """Undo :func:`permute`: ``out[index] = values``, so ``unpermute(permute(v, i), i) == v``.

    Parameters
    ----------
    values
        A permuted array (first axis of length ``len(index)``).
    index
        The permutation that was applied.

    Returns
    -------
    ndarray
        A new array with the original order and the dtype of ``values``.

    Raises
    ------
    ValidationError
        If ``index`` is not a permutation of ``0 … len(values)−1``.
    """
    arr = _check_values(values, "unpermute")
    idx = _check_index(index, arr.shape[0], "unpermute")
    out: NDArray[Any] = np.empty_like(arr)
    out[idx] = arr
    return out
