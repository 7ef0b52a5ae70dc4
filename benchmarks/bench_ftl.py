"""Federated transfer learning benchmark: what SS, OU and Paillier cost per epoch (islands.vfl.ftl).

Data: Fashion-MNIST (train split) in two views, the left and right halves of each image
(392 pixels each). B, the source, holds the right halves and the labels of ``--rows``
rows (default 5,000); A, the target, holds the left halves of the first N of them, the
overlap. Each view is standardised with its own column statistics. Without the data
set (``apt-get install dataset-fashion-mnist``), a synthetic ten-class mixture of the
same shape stands in, and the output says so.

The two roles of :mod:`islands.vfl.ftl.protocol` run directly (``run_local``, threads of
this process, no PSI: the overlap is given), with the library defaults otherwise
(``dim=32``, ``hidden=(128,)``, the Taylor softmax loss, anchored alignment, source
loss β = 1, batches of 64) and ``pretrain_epochs=0``, for 2 epochs. Every
configuration runs four times in the same process, one after the other: on secret
shares (``engine="ss"``, the default: the dealer D of :mod:`islands.vfl.ftl.ss` as a
third thread), under
Okamoto–Uchiyama on HEU (``he="ou"``, a 2048-bit key per party; HEU's own thread pool),
under Paillier (``he="paillier"``, a 2048-bit key per party with DJN fixed-base
randomness; Paillier work on the shared pool of worker processes, one per usable core)
and in the clear (``he="none"``: the same terms, unencrypted and unpadded). The ratios
of each protected run to the clear one are the figures to read; the absolute seconds
move with the machine's load. ``--schemes ss,ou`` leaves Paillier out (it takes most of
the time); without ``sf-heu`` the OU run is left out and the output says so.

Measured:

1. Overlap N in (32, 64, 128, 256) (``--overlaps``): seconds of the **second** epoch
   (the first also starts the worker processes and builds each key's DJN table), from
   B's end-of-epoch ``status`` messages in the transcript (as
   ``FederatedTransferLearner.epoch_seconds_``); encrypted, clear, their ratio, and
   encrypted seconds per overlap row; bytes exchanged in that epoch (every message of
   the transcript in it, and one epoch's deal from the dealer, which deals an epoch
   ahead); and where each party's time went in
   that epoch, as the protocol's clocks split it: homomorphic work (encoding,
   encryption, ciphertext products, decryption; under SS the ring work: encoding,
   masks, ring products, packing, reconstruction), plain compute (the networks and the
   terms in floats) and messaging (inside send and receive, which includes waiting for
   the peer). To cut the clocks at the epoch boundary, the
   benchmark swaps the protocol's ``Clock`` for a subclass that also records when each
   interval started and ended.
2. Dimension d in (8, 16, 32) (``--dims``) at a fixed overlap (``--dim-overlap``, 64):
   A forms ⟦Q̃u_i⟧ for every row, b·d² ciphertext exponentiations per batch, and each
   party decrypts O(b·d) values. The d = 32 row reuses section 1's run at that overlap.
3. The paper's configuration at that overlap and d = 32 (``loss="logistic"``,
   ``alignment="symmetric"``, ``source_weight=0``): symmetric alignment also sends A's
   rows ⟦U⟧ back through B's pads, b·d more encryptions for B and decryptions for A.
   ``--skip-paper`` leaves it out.

4. ``FederatedTransferLearner()`` with every default (``engine="ss"``, 30 epochs,
   5 epochs of B's pre-training) on scikit-learn's breast cancer, split as the issue
   measured it (B: 60% of the training rows with labels; A: the rest and 30% of B's
   rows, 82 overlap rows): the whole fit (PSI, pre-training, training), beside the same
   fit with ``engine="he", he="none"``. ``--skip-defaults`` leaves it out.

Key generation (one 2048-bit DJN key pair and one OU key, the key each party makes
before its first message) is timed apart and is in no epoch.

The two parties share this machine's cores (and one worker pool) in a simulation; their
homomorphic work overlaps in time, so the per-party seconds may add up to more than the
epoch. The share of the machine's CPU used by other processes during each run is
printed: figures are only trustworthy near 0%. So is the share the run's own processes
used in the reported epoch (``own``, the roles' process and its worker processes): near
100% with the A and B columns mostly homomorphic work, the epoch is the time of the
arithmetic on these cores; well below it, part of the epoch one party's HEU call held
the interpreter lock while the other waited.

    python benchmarks/bench_ftl.py [--quick] [--rows 5000] [--overlaps 32,64,128,256]
                                   [--dims 8,16,32] [--dim-overlap 64] [--epochs 2]
                                   [--key-bits 2048 [--insecure-keys]]
                                   [--schemes ss,ou,paillier]
                                   [--skip-paper] [--skip-defaults] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np

from common import environment, fmt_bytes, fmt_s, process_tree, source_digest
from common import finish as write_json
from islands.vfl.protocol import Clock

FULL: dict[str, Any] = {"rows": 5000, "overlaps": (32, 64, 128, 256), "dims": (8, 16, 32),
                        "dim_overlap": 64}
QUICK: dict[str, Any] = {"rows": 1000, "overlaps": (32, 64), "dims": (8, 32), "dim_overlap": 32}
PARTS = ("crypto", "runtime", "vfl")  # the sources measured (for the digest)


@dataclass
class RecordingClock(Clock):
    """The protocol's :class:`Clock`, also keeping every interval (what, start, end)."""

    intervals: list[tuple[str, float, float]] = field(default_factory=list)

    @contextmanager
    def timing(self, what: str) -> Any:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            t1 = time.perf_counter()
            setattr(self, what, getattr(self, what) + t1 - t0)
            self.intervals.append((what, t0, t1))

    def between(self, lo: float, hi: float) -> dict[str, float]:
        """Seconds of each kind inside [lo, hi] (intervals clipped to it)."""
        out = {"he": 0.0, "compute": 0.0, "messaging": 0.0}
        for what, t0, t1 in self.intervals:
            out[what] += max(0.0, min(t1, hi) - max(t0, lo))
        return out


@contextmanager
def recording_clocks() -> Any:
    """Make the FTL roles use :class:`RecordingClock` for the duration."""
    from islands.vfl.ftl import protocol

    with mock.patch.object(protocol, "Clock", RecordingClock):
        yield


# ------------------------------------------------------------------ CPU of others
def _tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root``'s live process tree (and reaped children)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total / tick


def cpu_snapshot() -> tuple[float, float]:
    """(busy core-seconds of the whole machine, CPU seconds of this process tree)."""
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:9]]
    busy = (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
    return busy, _tree_cpu_seconds(os.getpid())


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def other_share(before: tuple[float, float], after: tuple[float, float], wall: float) -> float:
    """Share of the machine's CPU capacity that other processes used over ``wall``."""
    others = (after[0] - before[0]) - (after[1] - before[1])
    return max(0.0, others) / (_cores() * wall) if wall > 0 else 0.0


def own_share(before: tuple[float, float], after: tuple[float, float], wall: float) -> float:
    """Share of the machine's CPU capacity this process tree (roles and workers) used."""
    return (after[1] - before[1]) / (_cores() * wall) if wall > 0 else 0.0


# ------------------------------------------------------------------ data
def load_views(rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(A's view, B's view, labels) of ``rows`` rows, each view standardised; the source."""
    from islands.data.datasets import load_fashion_mnist
    from islands.data.views import split_image_views
    from islands.errors import DataNotFoundError

    try:
        ds = load_fashion_mnist(split="train")
        order = np.random.default_rng(0).permutation(ds.X.shape[0])[:rows]
        left, right = split_image_views(ds.X[order], ds.image_shape or (28, 28))
        y = np.asarray(ds.y)[order].astype(np.int64)
        source = "Fashion-MNIST train, left | right halves"
    except DataNotFoundError:
        rng = np.random.default_rng(0)
        y = rng.integers(0, 10, size=rows)
        centres = rng.normal(size=(10, 784))
        x = centres[y] + 2.0 * rng.normal(size=(rows, 784))
        left, right = x[:, :392], x[:, 392:]
        source = "synthetic 10-class mixture, 392 + 392 features (Fashion-MNIST not found)"

    def standardise(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64)
        sd = v.std(axis=0)
        out: np.ndarray = (v - v.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
        return out

    return standardise(left), standardise(right), y, source


# ------------------------------------------------------------------ one run
PAPER = {"loss": "logistic", "alignment": "symmetric", "source_weight": 0.0}


def run_once(data: tuple[np.ndarray, np.ndarray, np.ndarray], overlap: int, dim: int,
             he: str, args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """Train for ``args.epochs`` epochs; per-epoch seconds, bytes and clock splits."""
    from islands.runtime import run_local
    from islands.vfl.ftl.protocol import Plan, source, target
    from islands.vfl.ftl.ss import dealer as ss_dealer

    x_a, x_b, y = data
    rows = np.arange(overlap)
    engine: dict[str, Any] = {"engine": "ss"} if he == "ss" else {"engine": "he", "he": he}
    plan = Plan(dim=dim, pretrain_epochs=0, epochs=args.epochs, key_bits=args.key_bits,
                insecure_keys=args.insecure_keys, seed=0, **engine, **extra)
    dealer = "D" if he == "ss" else None
    marks: list[float] = []  # perf_counter at the end of each of B's epochs
    cpu_marks: list[tuple[float, float]] = []  # cpu_snapshot() at the same moments

    def progress(epoch: int, epochs: int, loss: float) -> None:
        marks.append(time.perf_counter())
        cpu_marks.append(cpu_snapshot())

    before = cpu_snapshot()
    t0 = time.perf_counter()
    with recording_clocks():
        roles: dict[str, Any] = {
            "A": partial(target, X=x_a[rows], peer="B", plan=plan, init_seed=0,
                         dealer=dealer),
            "B": partial(source, X=x_b, labels=y, overlap=rows, n_classes=10, peer="A",
                         plan=plan, progress=progress, init_seed=1, dealer=dealer),
        }
        if dealer is not None:
            roles[dealer] = partial(ss_dealer, target="A", source="B", plan=plan)
        run = run_local(roles, timeout=3600, blas_threads=None)
    wall = time.perf_counter() - t0
    after = cpu_snapshot()
    share = other_share(before, after, wall)
    # the last epoch alone (key generation and worker start-up are in the first)
    own = own_share(cpu_marks[-2], cpu_marks[-1], marks[-1] - marks[-2]) \
        if len(marks) >= 2 else own_share(before, after, wall)
    tr = run.transcript
    start = max(r.time for r in tr if r.tag == "hello")  # both hellos out: training starts
    status = [r.time for r in tr if r.tag == "status"]
    bounds = [start, *status]
    epoch_s = [b - a for a, b in itertools.pairwise(bounds)]
    # the dealer deals an epoch ahead: count each epoch's own deal (all epochs' deals
    # have the same size), not the one sent during it
    deals = [r for r in tr if r.tag == "deal"]
    deal_bytes = sum(r.nbytes for r in deals) / max(1, len([r for r in deals
                                                            if r.receiver == "A"]))
    epoch_bytes = [sum(r.nbytes for r in tr if a < r.time <= b and r.tag != "deal")
                   + deal_bytes for a, b in itertools.pairwise(bounds)]
    clocks: dict[str, dict[str, float]] = {}
    if len(marks) >= 2:  # the last epoch, cut with B's own end-of-epoch marks
        for name in ("A", "B"):
            clock = run.results[name].clock
            assert isinstance(clock, RecordingClock)
            clocks[name] = {k: round(v, 4) for k, v in clock.between(marks[-2],
                                                                     marks[-1]).items()}
    return {"overlap": overlap, "dim": dim, "he": he, "epoch_s": epoch_s,
            "last_epoch_s": epoch_s[-1], "last_epoch_bytes": epoch_bytes[-1],
            "wall_s": wall, "keygen_and_hello_s": start, "losses":
            [round(v, 6) for v in run.results["B"].epoch_losses],
            "last_epoch_clock": clocks, "other_cpu_share": round(share, 3),
            "own_cpu_share": round(own, 3)}


def pair(data: tuple[np.ndarray, np.ndarray, np.ndarray], overlap: int, dim: int,
         args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """The encrypted runs and the clear run of one configuration, and their ratios."""
    out: dict[str, Any] = {"overlap": overlap, "dim": dim, "plan": extra}
    for he in args.schemes:
        out[he] = run_once(data, overlap, dim, he, args, **extra)
    plain = out["none"] = run_once(data, overlap, dim, "none", args, **extra)
    for he in args.schemes:
        out[f"{he}_ratio"] = out[he]["last_epoch_s"] / plain["last_epoch_s"]
        out[f"{he}_s_per_row"] = out[he]["last_epoch_s"] / overlap
    return out


# ------------------------------------------------------------------ printing
NAMES = {"ss": "SS", "ou": "OU", "paillier": "Paillier"}
HEAD = (f"{'scheme':>9s} {'epoch':>9s} {'clear':>9s} {'ratio':>7s} {'s/row':>8s} {'bytes':>9s}"
        "   A: he / compute / msg      B: he / compute / msg     own  others")


def print_overlaps(rows: list[dict[str, Any]], epoch: int, schemes: tuple[str, ...]) -> None:
    print(f"1. seconds of epoch {epoch} by overlap size (d = 32, batches of 64)")
    print(f"   {'overlap':>7s} {HEAD}")
    for r in rows:
        for he in schemes:
            print("   " + line(r, r["overlap"], he))


def line(r: dict[str, Any], key: int, he: str) -> str:
    enc, plain = r[he], r["none"]
    split = "  ".join(
        "/".join(f"{enc['last_epoch_clock'].get(p, {}).get(k, float('nan')):.2f}"
                 for k in ("he", "compute", "messaging")).ljust(24)
        for p in ("A", "B"))
    return (f"{key:7d} {NAMES[he]:>9s} {fmt_s(enc['last_epoch_s']):>9s} "
            f"{fmt_s(plain['last_epoch_s']):>9s} {r[f'{he}_ratio']:6.1f}× "
            f"{r[f'{he}_s_per_row']:8.4f} {fmt_bytes(enc['last_epoch_bytes']):>9s}   {split}  "
            f"{enc['own_cpu_share']:4.0%}  {enc['other_cpu_share']:.0%}")


def print_dims(rows: list[dict[str, Any]], overlap: int, epoch: int,
               schemes: tuple[str, ...]) -> None:
    print(f"2. seconds of epoch {epoch} by dimension d (overlap {overlap}, batches of 64)")
    print(f"   {'d':>7s} {HEAD}")
    for r in rows:
        for he in schemes:
            print("   " + line(r, r["dim"], he))


def parse_ints(text: str, name: str, parser: argparse.ArgumentParser) -> tuple[int, ...]:
    try:
        values = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        parser.error(f"{name}: comma-separated ints; got {text!r}")
    if not values or min(values) < 1:
        parser.error(f"{name}: ints >= 1; got {text!r}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--quick", action="store_true",
                        help="1,000 labelled rows, overlaps 32,64, d in 8,32 at overlap 32")
    parser.add_argument("--rows", type=int, default=0, help="B's labelled rows (5000)")
    parser.add_argument("--overlaps", default="", help="overlap sizes (32,64,128,256)")
    parser.add_argument("--dims", default="", help="dimensions d of section 2 (8,16,32)")
    parser.add_argument("--dim-overlap", type=int, default=0,
                        help="overlap of section 2 (64)")
    parser.add_argument("--epochs", type=int, default=2,
                        help="epochs per run; the last one is reported (2)")
    parser.add_argument("--key-bits", type=int, default=2048)
    parser.add_argument("--insecure-keys", action="store_true",
                        help="allow --key-bits below 2048 (insecure; the results record it)")
    parser.add_argument("--schemes", default="ss,ou,paillier",
                        help="protected engines to run beside the clear one (ss,ou,paillier)")
    parser.add_argument("--skip-paper", action="store_true",
                        help="leave out section 3 (the paper's configuration)")
    parser.add_argument("--skip-defaults", action="store_true",
                        help="leave out section 4 (the defaults on breast cancer)")
    args = parser.parse_args()
    args.blas_threads = None  # for finish()'s record: the libraries' defaults
    sizes = QUICK if args.quick else FULL
    rows: int = args.rows or sizes["rows"]
    overlaps: tuple[int, ...] = (parse_ints(args.overlaps, "--overlaps", parser)
                                 if args.overlaps else sizes["overlaps"])
    dims: tuple[int, ...] = parse_ints(args.dims, "--dims", parser) if args.dims else \
        sizes["dims"]
    dim_overlap: int = args.dim_overlap or sizes["dim_overlap"]
    if args.epochs < 2:
        parser.error("--epochs: at least 2 (the first epoch carries the start-up costs)")
    if max((*overlaps, dim_overlap)) > rows:
        parser.error(f"overlaps must be at most --rows ({rows})")

    from islands.crypto import heu, paillier
    from islands.vfl.ftl import FtlConfig
    from islands.vfl.keys import insecure_key_note

    try:  # the key settings first: --key-bits below 2048 needs --insecure-keys
        FtlConfig.build("bench_ftl", key_bits=args.key_bits, insecure_keys=args.insecure_keys)
    except ValueError as exc:
        parser.error(str(exc))
    args.schemes = tuple(s.strip() for s in args.schemes.split(",") if s.strip())
    if not args.schemes or set(args.schemes) - set(NAMES):
        parser.error(f"--schemes: a comma-separated subset of {sorted(NAMES)}")
    missing = ""
    if "ou" in args.schemes and not heu.available():
        args.schemes = tuple(s for s in args.schemes if s != "ou")
        missing = "OU left out: sf-heu does not import here (pip install 'islands[heu]')"
        if not args.schemes:
            parser.error(missing)
    digests = {source_digest(PARTS)}
    started = time.perf_counter()
    t0 = time.perf_counter()
    paillier.generate_djn_keypair(args.key_bits)
    keygen = time.perf_counter() - t0
    keygen_ou = None
    if "ou" in args.schemes:
        t0 = time.perf_counter()
        heu.OuKeyOwner(args.key_bits)
        keygen_ou = time.perf_counter() - t0
    x_a, x_b, y, data_source = load_views(rows)
    data = (x_a, x_b, y)
    note = insecure_key_note("paillier", args.key_bits)
    if note:
        print(f"WARNING: {note}")
    results: dict[str, Any] = {"key_bits": args.key_bits,
                               **({"security_warning": note} if note else {}),
                               "keygen_djn_s": keygen,
                               "keygen_ou_s": keygen_ou, "schemes": list(args.schemes),
                               "data": data_source, "rows_b": rows, "epochs": args.epochs,
                               "reported": f"epoch {args.epochs} (the last)"}
    overlap_rows = []
    for n in overlaps:
        print(f"[{time.perf_counter() - started:6.0f} s] overlap {n}, d = 32...",
              file=sys.stderr, flush=True)
        overlap_rows.append(pair(data, n, 32, args))
    dim_rows = []
    for d in dims:
        reuse = [r for r in overlap_rows if r["overlap"] == dim_overlap and d == 32]
        if reuse:
            dim_rows.append(reuse[0])
            continue
        print(f"[{time.perf_counter() - started:6.0f} s] d = {d}, overlap {dim_overlap}...",
              file=sys.stderr, flush=True)
        dim_rows.append(pair(data, dim_overlap, d, args))
    results["overlaps"] = overlap_rows
    results["dims"] = {"overlap": dim_overlap, "rows": dim_rows}
    if not args.skip_paper:
        print(f"[{time.perf_counter() - started:6.0f} s] paper's configuration, overlap "
              f"{dim_overlap}...", file=sys.stderr, flush=True)
        results["paper"] = pair(data, dim_overlap, 32, args, **PAPER)
    if not args.skip_defaults:
        print(f"[{time.perf_counter() - started:6.0f} s] FederatedTransferLearner() "
              "defaults on breast cancer...", file=sys.stderr, flush=True)
        results["defaults"] = defaults_fit()
    results["total_s"] = time.perf_counter() - started
    digests.add(source_digest(PARTS))

    import gmpy2
    import torch

    env = environment()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    print(f"FTL benchmark{' (--quick)' if args.quick else ''}: Python {env['python']}, "
          f"numpy {env['numpy']}, torch {torch.__version__}, gmpy2 {gmpy2.version()}, "
          f"{env['cpus']} CPUs ({cores} usable), {results['total_s']:.0f} s in all")
    print(f"data: {data_source}; B holds {rows:,} labelled rows, A the overlap rows")
    print(f"{args.key_bits}-bit DJN key generation: {fmt_s(keygen)}"
          + ("" if keygen_ou is None else f", OU (HEU): {fmt_s(keygen_ou)}")
          + " (each party makes one per run, before training: in no epoch)")
    if missing:
        print(missing)
    print(f"SS: engine=\"ss\" (ring Z_P, P ≈ 2^189, dealer D in a third thread); OU: "
          f"{args.key_bits}-bit Okamoto-Uchiyama on HEU (he=\"ou\"); Paillier: "
          f"{args.key_bits}-bit DJN (he=\"paillier\"); clear: he=\"none\", same run. "
          "ratio: the scheme's epoch / the clear epoch. s/row: the scheme's seconds per "
          "overlap row. bytes: exchanged in that epoch (every message, the dealer's "
          "included). A/B: seconds of the scheme's epoch per party, homomorphic or ring "
          "work / plain compute / messaging. own: CPU share of the machine this run's "
          "processes used in that epoch (roles and worker processes). others: CPU share "
          "of other processes in that run.")
    print_overlaps(overlap_rows, args.epochs, args.schemes)
    print_dims(dim_rows, dim_overlap, args.epochs, args.schemes)
    if "paper" in results:
        default = next(r for r in dim_rows if r["dim"] == 32) if 32 in dims else None
        print(f"3. the paper's configuration (logistic, symmetric, β = 0), overlap "
              f"{dim_overlap}, d = 32, epoch {args.epochs}"
              + ("" if default is None else " (defaults: " + ", ".join(
                  f"{NAMES[he]} {fmt_s(default[he]['last_epoch_s'])}"
                  for he in args.schemes) + ")"))
        for he in args.schemes:
            print("   " + line(results["paper"], 32, he))
    if "defaults" in results:
        fit = results["defaults"]
        print(f"4. FederatedTransferLearner() defaults, breast cancer, whole fit: "
              f"{fit['ss']['fit_s']:.2f} s ({fit['ss']['overlap']} overlap rows, "
              f"{fit['ss']['epochs']} epochs, median epoch {fmt_s(fit['ss']['epoch_s'])}, "
              f"{fmt_bytes(fit['ss']['epoch_bytes'])} per epoch, accuracy "
              f"{fit['ss']['accuracy']:.3f}); engine=\"he\", he=\"none\": "
              f"{fit['none']['fit_s']:.2f} s (median epoch {fmt_s(fit['none']['epoch_s'])}, "
              f"accuracy {fit['none']['accuracy']:.3f})")
    write_json("ftl", args, digests, results, {})


def defaults_fit() -> dict[str, Any]:
    """FederatedTransferLearner() defaults on breast cancer: whole fit, SS and clear."""
    import statistics

    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    from islands.vfl import FederatedTransferLearner

    X, y = load_breast_cancer(return_X_y=True)
    perm = np.random.default_rng(0).permutation(y.size)
    test, train = perm[:114], perm[114:]
    nb = round(0.6 * train.size)
    b_rows, a_only = train[:nb], train[nb:]
    a_rows = np.concatenate([a_only, b_rows[:round(0.3 * nb)]])
    xs = StandardScaler().fit_transform(X)
    out: dict[str, Any] = {}
    runs: tuple[tuple[str, dict[str, Any]], ...] = (
        ("ss", {}), ("none", {"engine": "he", "he": "none"}))
    for name, params in runs:
        model = FederatedTransferLearner(random_state=0, **params)
        t0 = time.perf_counter()
        model.fit(xs[a_rows, :15], xs[b_rows, 15:], y[b_rows], a_rows.tolist(),
                  b_rows.tolist())
        fit_s = time.perf_counter() - t0
        marks = [r.time for r in model.transcript_ if r.tag == "status"]
        sizes = [sum(r.nbytes for r in model.transcript_ if lo < r.time <= hi)
                 for lo, hi in itertools.pairwise(marks)]
        out[name] = {"fit_s": fit_s, "overlap": model.n_overlap_, "epochs": model.n_epochs_,
                     "epoch_s": statistics.median(model.epoch_seconds_),
                     "epoch_bytes": statistics.median(sizes) if sizes else 0,
                     "accuracy": model.score(xs[test, :15], y[test])}
    return out


if __name__ == "__main__":
    main()
