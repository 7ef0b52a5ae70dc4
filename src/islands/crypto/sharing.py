"""Additive secret sharing over Z_{2^64} (tutorial §3.2 of the FL privacy tutorial).

A secret vector x in the ring is split into n shares: n−1 drawn uniformly at random with
a cryptographic generator and the last x − Σ others (mod 2^64). Any n−1 shares are
uniformly distributed and independent of x; all n sum to x. Arithmetic modulo 2^64 is
numpy's native wrap-around on uint64.

These are the maths of every secret sum in islands: :mod:`islands.securesum` (parties
deal shares to one another), :mod:`islands.aggregation.additive` (clients deal shares of their
updates) and the secure mode of :mod:`islands.pca.protocol` (which masks with pairwise
keys instead of dealing shares, and adds the masked ring elements with :func:`reconstruct`).
Each protocol keeps its own messages and checks; dealing (:func:`share_among`) and adding
(:func:`reconstruct`) are done here.

References
----------
.. [1] The FL privacy-computing tutorial, §3.2 (``papers/fl-privacy-computing-tutorial``).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from islands.errors import ValidationError, invalid_parameter

__all__ = ["additive_shares", "random_ring_elements", "reconstruct", "share_among"]


def random_ring_elements(shape: int | tuple[int, ...]) -> NDArray[np.uint64]:
    """Uniform elements of Z_{2^64} from the operating system's CSPRNG (never numpy)."""
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    count = int(np.prod(dims, dtype=np.int64))
    raw = secrets.token_bytes(8 * count)
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64).reshape(dims)


def additive_shares(secret: NDArray[np.uint64], n: int) -> list[NDArray[np.uint64]]:
    """Split ring elements into ``n`` additive shares.

    Parameters
    ----------
    secret
        uint64 ring elements (e.g. from :func:`islands.crypto.fixedpoint.encode_fixed`).
    n
        Number of shares, at least 2.

    Returns
    -------
    list of ndarray
        ``n`` arrays shaped like ``secret`` whose sum modulo 2^64 is ``secret``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise invalid_parameter("n", "additive_shares", "an int >= 2", n)
    if not isinstance(secret, np.ndarray) or secret.dtype != np.uint64:
        raise ValidationError("additive_shares expects a uint64 array of ring elements")
    shares = [random_ring_elements(secret.shape) for _ in range(n - 1)]
    last = secret.copy()
    for share in shares:
        last -= share
    return [*shares, last]


def share_among(secret: NDArray[np.uint64],
                names: Sequence[str]) -> dict[str, NDArray[np.uint64]]:
    """Deal ``secret`` to named holders: one additive share each (:func:`additive_shares`).

    Parameters
    ----------
    secret
        uint64 ring elements.
    names
        The holders, at least 2 and distinct; the owner of the secret is usually one of
        them and keeps its own share.

    Returns
    -------
    dict
        Each name's share, in the order of ``names``; all of them sum to ``secret``.
    """
    if len(set(names)) != len(names):
        raise ValidationError(f"share_among needs distinct holders; got {list(names)}")
    return dict(zip(names, additive_shares(secret, len(names)), strict=True))


def reconstruct(shares: Sequence[NDArray[np.uint64]]) -> NDArray[np.uint64]:
    """Sum shares (or any ring elements: partial sums, masked values) modulo 2^64."""
    if not shares:
        raise ValidationError("reconstruct needs at least one share")
    total = np.zeros_like(shares[0], dtype=np.uint64)
    for share in shares:
        if share.shape != total.shape or share.dtype != np.uint64:
            raise ValidationError(
                f"shares must all be uint64 of shape {total.shape}; got {share.dtype}{share.shape}"
            )
        total += share
    return total
