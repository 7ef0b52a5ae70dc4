"""HFL protections benchmark: the APFL paper's Table 1, and secure aggregation at scale.

1. Table 1 structure (APFL §5, ALGORITHMS.md §3): for 500, 2000 and 54,000 parameters,
   seconds to encrypt one client's vector, to add (the server's weighted sum of 3
   uploads), and to decrypt, for CKKS (TenSEAL, the default parameters of
   :mod:`islands.crypto.ckks`), packed Paillier (2048-bit, :mod:`islands.crypto.paillier`,
   with r^n computed on the spot, and the online cost once the r^n pool is filled off
   the critical path), unpacked Paillier (one value per ciphertext, the paper's
   baseline; at 54,000 extrapolated from the 2000-value rate, as the paper's own 410 s
   would be), and the chaos sequence (logistic orbit + argsort). The baseline in the
   same run is the plain weighted mean of the 3 float vectors (numpy). Targets: CKKS
   full round for 3 clients × 54,000 (3 encryptions, the weighted sum, one decryption)
   ≤ 0.3 s; packed Paillier encryption of 2000 values ≤ 1 s. The paper's figures are
   printed beside ours.
2. Secure aggregation (Bonawitz et al.) through the engine's real roles, N ∈ {100, 500}
   clients × 100,000 parameters, 0% and 30% dropout (the dropped clients fail after
   sharing their keys, before uploading: the costly case, where the server rebuilds
   their mask keys and removes |U3|·|dropped| pairwise masks), against the plain mean in
   the same run. Local training is replaced by a no-op (w ↦ w + 0.001), so the figures
   are the protocol's. Reported: CPU seconds of one client's protocol work (mean over
   clients; thread CPU time, so the other clients' threads do not count), the server's
   CPU seconds for the round's aggregation, bytes sent and received per client, and the
   ratios to plain aggregation.
3. DP-SGD (sample-level DP, :mod:`islands.hfl.torch.dpsgd`): seconds per local step of the
   APFL MLP (784-200-10, 159,010 parameters) and of the CNN on 1×28×28 inputs, batch
   64, against the plain :class:`~islands.hfl.torch.training.Trainer` step in the same run.
   The DP step adds Opacus's per-sample gradients, clipping, a CSPRNG Gaussian draw per
   parameter and the Poisson sample.
4. One aggregation round of ``protect = ["ckks"]`` and of ``["paillier"]`` under each
   engine, ``he = "paillier"`` and ``he = "ou"`` (HEU's Okamoto–Uchiyama), through the
   aggregator's real halves (:class:`~islands.hfl.server_audit.HEFederation`: 4 clients,
   c0 deals a 2048-bit key): seconds of one client's upload (MAC, pack, encrypt,
   serialise; mean of the 4), of the server's sum of the 4 uploads (parse and add), of
   one client's opening (parse, decrypt, MAC check, unpack), and the bytes of one upload;
   then the MAC's own cost (the client's tag and its check, timed alone on the same data
   in the same run) as a share of the upload and the opening. Paillier's first upload
   also starts its background r^n pool, as in a run.

   ``--plus 100,300,1000`` adds SecAgg+ (:mod:`islands.aggregation.secaggplus`, defaults
   γ = .05, δ = .10) at 10% dropout beside the full graph (up to 300 clients: it is
   quadratic) and the plain mean, in the same run, and prints the server CPU's log-log
   slope from 300 to 1000 clients; ``--flower-python`` runs Flower's SecAgg+ for the same
   round through ``peers/flower_secaggplus_round.py`` where that script exists.

    python benchmarks/bench_protect.py [--json OUT] [--quick] [--only 1,2,3,4] [--clients 100,500]
        [--plus 100,300,1000] [--flower-python PATH]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import fmt_bytes, fmt_s, median, verdict

PAPER = {  # APFL Table 1, seconds: encrypt, decrypt, add
    "ckks": {500: (9.37e-3, 1.56e-3, 0.15e-3), 2000: (9.68e-3, 17.18e-3, 0.15e-3),
             54000: (0.54, 0.03, 0.02)},
    "paillier": {500: (3.82, 1.06, 7.87e-3), 2000: (14.61, 4.22, 30.03e-3),
                 54000: (410.32, 115.92, 0.87)},
    "chaos": {500: 12.05e-3, 2000: 25.50e-3, 54000: 0.40},
}
SIZES = (500, 2000, 54000)


def timed(fn: Any, repeats: int = 3) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return median(times), out


# --------------------------------------------------------------------------- 1
def bench_table1(quick: bool) -> dict[str, Any]:
    from islands.crypto import chaos, ckks, paillier

    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    ctx = ckks.make_context()
    public = ckks.load_context(ckks.public_context_bytes(ctx), secret=False)
    pk, sk = paillier.generate_keypair(2048)
    spec = paillier.packing_spec(2048)
    one = paillier.unpacked_spec(2048) if hasattr(paillier, "unpacked_spec") else \
        paillier.packing_spec(2048, slots=1)
    key = chaos.generate_chaos_key()
    weights = [0.5, 0.3, 0.2]
    for n in SIZES:
        vs = [rng.normal(scale=0.1, size=n) for _ in range(3)]
        row: dict[str, Any] = {}
        plain, _ = timed(lambda vs=vs: sum(w * v for w, v in zip(weights, vs, strict=True)))
        row["plain_mean_s"] = plain

        enc, chunks = timed(lambda v=vs[0]: ckks.encrypt_vector(ctx, v))
        uploads = [chunks] + [ckks.encrypt_vector(ctx, v) for v in vs[1:]]

        def wsum(uploads: list[Any] = uploads, n: int = n) -> list[bytes]:
            s = ckks.EncryptedSum(public, n)
            for w, u in zip(weights, uploads, strict=True):
                s.add(u, w)
            return s.result()

        add, total = timed(wsum)
        dec, got = timed(lambda total=total, n=n: ckks.decrypt_vector(ctx, total, n))
        err = float(np.max(np.abs(got - sum(w * v for w, v in zip(weights, vs, strict=True)))))

        def full_round(vs: list[Any] = vs, n: int = n) -> None:
            ups = [ckks.encrypt_vector(ctx, v) for v in vs]
            s = ckks.EncryptedSum(public, n)
            for w, u in zip(weights, ups, strict=True):
                s.add(u, w)
            ckks.decrypt_vector(ctx, s.result(), n)

        full, _ = timed(full_round)
        row["ckks"] = {"encrypt_s": enc, "add_s": add, "decrypt_s": dec, "round_3_s": full,
                       "bytes_per_upload": sum(len(c) for c in chunks), "max_error": err}

        scaled = [w * v for w, v in zip(weights, vs, strict=True)]
        p_enc, blob = timed(lambda v=scaled[0]: paillier.encrypt_vector(pk, v, spec),
                            repeats=1 if n > 2000 else 3)
        pool = paillier.RandomnessPool(pk, spec.ciphertexts_for(n), private_key=sk)
        p_online, _ = timed(lambda v=scaled[0], pool=pool: paillier.encrypt_vector(
            pk, v, spec, pool=pool), repeats=1)
        blobs = [blob] + [paillier.encrypt_vector(pk, v, spec) for v in scaled[1:]]
        p_add, summed = timed(lambda blobs=blobs: paillier.sum_encrypted(pk, blobs))
        p_dec, got = timed(lambda s=summed, n=n: paillier.decrypt_vector(
            sk, s, n, spec, terms=3), repeats=1 if n > 2000 else 3)
        row["paillier_packed"] = {
            "encrypt_s": p_enc, "encrypt_online_s": p_online, "add_s": p_add,
            "decrypt_s": p_dec, "ciphertexts": spec.ciphertexts_for(n),
            "max_error": float(np.max(np.abs(got - sum(scaled))))}
        if n <= 2000 and not (quick and n > 500):
            u_enc, ublob = timed(lambda v=scaled[0]: paillier.encrypt_vector(pk, v, one),
                                 repeats=1)
            ublobs = [ublob] + [paillier.encrypt_vector(pk, v, one) for v in scaled[1:]]
            u_add, usum = timed(lambda b=ublobs: paillier.sum_encrypted(pk, b), repeats=1)
            u_dec, _ = timed(lambda s=usum, n=n: paillier.decrypt_vector(sk, s, n, one,
                                                                         terms=3), repeats=1)
            row["paillier_unpacked"] = {"encrypt_s": u_enc, "add_s": u_add,
                                        "decrypt_s": u_dec, "extrapolated": False}
        else:
            base = out.get(2000, out.get(500))["paillier_unpacked"]
            ref = 2000 if 2000 in out else 500
            f = n / ref
            row["paillier_unpacked"] = {k: base[k] * f for k in ("encrypt_s", "add_s",
                                                                 "decrypt_s")}
            row["paillier_unpacked"]["extrapolated"] = True

        def chaos_seq(n: int = n) -> Any:
            chaos.clear_permutation_cache()
            return chaos.permutation(key, n)

        row["chaos_s"], _ = timed(chaos_seq)
        out[n] = row
    return out


def print_table1(res: dict[str, Any]) -> None:
    print("\n1. APFL Table 1 structure: seconds (paper's in brackets)")
    print(f"{'':28}" + "".join(f"{n:>22}" for n in SIZES))

    def line(label: str, values: list[str]) -> None:
        print(f"{label:28}" + "".join(f"{v:>22}" for v in values))

    line("plain weighted mean (3)", [fmt_s(res[n]["plain_mean_s"]) for n in SIZES])
    for name, paper_i, key in (("encrypt", 0, "encrypt_s"), ("add", 2, "add_s"),
                               ("decrypt", 1, "decrypt_s")):
        line(f"CKKS {name}", [f"{fmt_s(res[n]['ckks'][key])} [{fmt_s(PAPER['ckks'][n][paper_i])}]"
                              for n in SIZES])
    line("CKKS round, 3 clients", [fmt_s(res[n]["ckks"]["round_3_s"]) for n in SIZES])
    line("CKKS bytes/upload", [fmt_bytes(res[n]["ckks"]["bytes_per_upload"]) for n in SIZES])
    for name, paper_i, key in (("encrypt", 0, "encrypt_s"), ("add", 2, "add_s"),
                               ("decrypt", 1, "decrypt_s")):
        line(f"Paillier packed {name}",
             [f"{fmt_s(res[n]['paillier_packed'][key])} "
              f"[{fmt_s(PAPER['paillier'][n][paper_i])}]" for n in SIZES])
    line("Paillier packed, pool ready", [fmt_s(res[n]["paillier_packed"]["encrypt_online_s"])
                                         for n in SIZES])
    for name, key in (("encrypt", "encrypt_s"), ("add", "add_s"), ("decrypt", "decrypt_s")):
        line(f"Paillier unpacked {name}",
             [fmt_s(res[n]["paillier_unpacked"][key])
              + ("*" if res[n]["paillier_unpacked"]["extrapolated"] else "") for n in SIZES])
    line("chaos sequence", [f"{fmt_s(res[n]['chaos_s'])} [{fmt_s(PAPER['chaos'][n])}]"
                            for n in SIZES])
    print("* extrapolated linearly from the largest size measured")
    ck = res[54000]["ckks"]["round_3_s"]
    pa = res[2000]["paillier_packed"]["encrypt_s"]
    print(f"target CKKS round 3 × 54000 <= 0.3 s: {fmt_s(ck)} {verdict(ck <= 0.3)}")
    print(f"target packed Paillier encrypt 2000 <= 1 s: {fmt_s(pa)} {verdict(pa <= 1.0)}")


# --------------------------------------------------------------------------- 2
class _Noop:
    def __init__(self, n: int) -> None:
        self.n = n

    n_train = property(lambda self: self.n)
    n_eval = property(lambda self: 0)

    def train(self, params: Any, **kw: Any) -> Any:
        from islands.hfl.protocol import LocalOutcome

        return LocalOutcome(params=params + np.float32(0.001), state=None, loss=0.0)

    def evaluate(self, params: Any) -> float:
        return 0.0


class _Timed:
    """A client half that counts its thread's CPU time (and can die before uploading)."""

    def __init__(self, inner: Any, dies: bool) -> None:
        self.inner, self.dies, self.cpu = inner, dies, 0.0

    def on_step(self, party: Any, **kw: Any) -> Any:
        t0 = time.thread_time()
        try:
            return self.inner.on_step(party, **kw)
        finally:
            self.cpu += time.thread_time() - t0

    def open(self, payload: Any) -> Any:
        return self.inner.open(payload)

    def payload(self, party: Any, **kw: Any) -> Any:
        if self.dies:
            raise RuntimeError("dropped out before uploading")
        t0 = time.thread_time()
        try:
            return self.inner.payload(party, **kw)
        finally:
            self.cpu += time.thread_time() - t0


def secagg_round(n: int, dim: int, dropout: float, secure: bool | str) -> dict[str, Any]:
    """One round; ``secure`` True is the full graph, "plus" SecAgg+, False the plain mean."""
    from islands.aggregation.base import MeanAggregator
    from islands.aggregation.secagg import SecureAggregation
    from islands.aggregation.secaggplus import SecureAggregationPlus
    from islands.hfl import FedAvg
    from islands.hfl.protocol import client, server
    from islands.runtime import Transcript, run_local

    agg: Any = (SecureAggregationPlus(dropout=max(dropout, 0.1)) if secure == "plus"
                else SecureAggregation(threshold=0.5) if secure else MeanAggregator())
    names = [f"c{i:03d}" for i in range(n)]
    drop = set(names[1::max(1, round(1 / dropout))][:round(dropout * n)]) if dropout else set()
    halves = {c: _Timed(agg.client_half(), c in drop) for c in names}
    w0 = np.zeros(dim, dtype=np.float32)
    cpu = {"server": 0.0}

    def timed_server(party: Any) -> Any:
        t0 = time.thread_time()
        try:
            return server(party, clients=names, strategy=FedAvg(
                local_steps=1, batch_size=None, aggregator=agg), initial=w0, epochs=1,
                concurrency=8, client_timeout=600.0, send_final=False)
        finally:
            cpu["server"] = time.thread_time() - t0

    roles: dict[str, Any] = {"server": timed_server}
    for c in names:
        roles[c] = partial(client, server="server", learner=_Noop(10), aggregator=agg,
                           half=halves[c])
    transcript = Transcript()
    t0 = time.perf_counter()
    res = run_local(roles, timeout=3600, tolerate=names, transcript=transcript,
                    blas_threads=None)
    wall = time.perf_counter() - t0
    srv = res.results["server"]
    sent = transcript.totals("sender")
    recv = transcript.totals("receiver")
    live = [c for c in names if c not in drop]
    return {
        "clients": n, "dim": dim, "dropout": dropout, "secure": secure,
        "survivors": srv.rounds[0].survivors, "wall_s": wall,
        "server_cpu_s": cpu["server"],
        "client_cpu_s": float(np.mean([halves[c].cpu for c in live])),
        "bytes_sent_per_client": float(np.mean([sent[c].nbytes for c in live])),
        "bytes_received_per_client": float(np.mean([recv[c].nbytes for c in live])),
    }


def bench_secagg(clients: list[int], dim: int) -> list[dict[str, Any]]:
    rows = []
    for n in clients:
        for dropout in (0.0, 0.3):
            plain = secagg_round(n, dim, dropout, secure=False)
            sec = secagg_round(n, dim, dropout, secure=True)
            sec["plain"] = plain
            rows.append(sec)
            print(f"  N={n} dropout={dropout:.0%}: server {fmt_s(sec['server_cpu_s'])} "
                  f"(plain {fmt_s(plain['server_cpu_s'])}), client "
                  f"{fmt_s(sec['client_cpu_s'])}, wall {fmt_s(sec['wall_s'])}", flush=True)
    return rows


FLOWER_K = 10
"""Flower's SecAgg+ neighbours in the comparison (``num_shares`` = 11: the client and 10)."""


def flower_secaggplus_round(python: str, n: int, dim: int, dropout: float
                            ) -> dict[str, Any]:
    """Flower's SecAgg+ for the same round, in its own venv (``flower.flower_secaggplus``).

    k = :data:`FLOWER_K` neighbours, threshold Flower's example's 2/3 of the shares, the
    dropped clients failing after sharing their keys; ``wall_s`` is Flower's seconds per
    completed round after the first (Ray's start-up excluded). A run whose rounds all
    halted is returned as ``{"error": ...}``.
    """
    from flower import PeerError, flower_secaggplus

    rounds = 2 if n >= 1000 else 3
    try:
        out = flower_secaggplus(python, n, dim, FLOWER_K, dropout, rounds=rounds,
                                timeout=1800)
    except PeerError as exc:
        return {"error": str(exc)[:300]}
    return {"wall_s": out["per_round_s"], "k": FLOWER_K, "rounds_s": out["rounds_s"],
            "halted_rounds": out["halted_rounds"], "pss_peak_bytes": out.get("pss_peak_bytes")}


def bench_secaggplus(clients: list[int], dim: int, dropout: float = 0.1,
                     flower_python: str | None = None) -> list[dict[str, Any]]:
    """SecAgg+ beside the full graph (up to 300 clients) and the plain mean, one run."""
    rows = []
    for n in clients:
        row: dict[str, Any] = {"clients": n, "dim": dim, "dropout": dropout}
        row["plain"] = secagg_round(n, dim, dropout, secure=False)
        row["plus"] = secagg_round(n, dim, dropout, secure="plus")
        row["full"] = secagg_round(n, dim, dropout, secure=True) if n <= 300 else None
        row["flower"] = (flower_secaggplus_round(flower_python, n, dim, dropout)
                         if flower_python else None)
        rows.append(row)
        full = row["full"]
        print(f"  N={n} dropout={dropout:.0%}: SecAgg+ wall {fmt_s(row['plus']['wall_s'])} "
              f"server {fmt_s(row['plus']['server_cpu_s'])} client "
              f"{fmt_s(row['plus']['client_cpu_s'])}"
              + (f"; full graph wall {fmt_s(full['wall_s'])}" if full else "")
              + f"; plain wall {fmt_s(row['plain']['wall_s'])}", flush=True)
    return rows


def print_secaggplus(rows: list[dict[str, Any]]) -> None:
    print(f"\n2+. SecAgg+ (sparse graph) beside the full graph and the plain mean, "
          f"{rows[0]['dim']:,} parameters, {rows[0]['dropout']:.0%} dropout, one round")
    head = ("N", "protocol", "wall", "server CPU", "client CPU", "sent/client")
    print("".join(f"{h:>14}" for h in head))
    for r in rows:
        for name in ("plain", "plus", "full", "flower"):
            x = r.get(name)
            if not x:
                continue
            if "error" in x:
                print(f"{r['clients']:>14}{'Flower SA+':>14}  failed: {x['error']}")
                continue
            label = {"plain": "plain mean", "plus": "SecAgg+", "full": "full graph",
                     "flower": "Flower SA+"}[name]
            vals = (r["clients"], label, fmt_s(x["wall_s"]), fmt_s(x.get("server_cpu_s", 0.0)),
                    fmt_s(x.get("client_cpu_s", 0.0)),
                    fmt_bytes(x.get("bytes_sent_per_client", 0.0)))
            print("".join(f"{v!s:>14}" for v in vals))
    by_n = {r["clients"]: r["plus"]["server_cpu_s"] for r in rows}
    if 300 in by_n and 1000 in by_n:
        slope = math.log(by_n[1000] / by_n[300]) / math.log(1000 / 300)
        print(f"SecAgg+ server CPU log-log slope 300 -> 1000: {slope:.2f} (target <= 1.2)")


def print_secagg(rows: list[dict[str, Any]]) -> None:
    print(f"\n2. Secure aggregation, {rows[0]['dim']:,} parameters per client, one round")
    head = ("N", "drop", "survivors", "client CPU", "server CPU", "plain server",
            "server ×", "sent/client", "recv/client", "plain sent", "bytes ×")
    print("".join(f"{h:>13}" for h in head))
    for r in rows:
        p = r["plain"]
        vals = (r["clients"], f"{r['dropout']:.0%}", r["survivors"], fmt_s(r["client_cpu_s"]),
                fmt_s(r["server_cpu_s"]), fmt_s(p["server_cpu_s"]),
                f"{r['server_cpu_s'] / max(p['server_cpu_s'], 1e-9):.1f}",
                fmt_bytes(r["bytes_sent_per_client"]), fmt_bytes(r["bytes_received_per_client"]),
                fmt_bytes(p["bytes_sent_per_client"]),
                f"{r['bytes_sent_per_client'] / p['bytes_sent_per_client']:.2f}")
        print("".join(f"{v!s:>13}" for v in vals))


# --------------------------------------------------------------------------- 3
def bench_dpsgd(quick: bool) -> list[dict[str, Any]]:
    import torch

    from islands.aggregation.protect import SampleDP
    from islands.hfl.torch.dpsgd import PrivateTrainer
    from islands.hfl.torch.models import ModelSpec
    from islands.hfl.torch.training import Position, Trainer

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    X = rng.random((2000, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, size=2000)
    steps = 10 if quick else 40
    rows = []
    for spec in (ModelSpec(kind="mlp", input_shape=(1, 28, 28), n_outputs=10, hidden=(200,)),
                 ModelSpec(kind="cnn", input_shape=(1, 28, 28), n_outputs=10)):
        trainer = Trainer(spec, X, y)
        private = PrivateTrainer(trainer, SampleDP(clip=1.0, noise_multiplier=1.0))
        w = spec.initial_params(0)
        kw = {"start": Position(0, 0), "steps": steps, "batch_size": 64, "lr": 0.1,
              "momentum": 0.5}
        plain, _ = timed(lambda t=trainer, w=w, kw=kw: t.train(w, **kw))
        dp, _ = timed(lambda p=private, w=w, kw=kw: p.train(w, **kw))
        rows.append({"model": spec.describe(), "parameters": spec.n_params(),
                     "plain_step_s": plain / steps, "dpsgd_step_s": dp / steps,
                     "ratio": dp / plain})
    return rows


def print_dpsgd(rows: list[dict[str, Any]]) -> None:
    print("\n3. DP-SGD step (batch 64, one torch thread) against a plain step, same run")
    for r in rows:
        print(f"  {r['model'].split(' (')[0][:32]:<32} {r['parameters']:>9,} params  plain "
              f"{fmt_s(r['plain_step_s'])}  DP-SGD {fmt_s(r['dpsgd_step_s'])}  "
              f"× {r['ratio']:.1f}")


# --------------------------------------------------------------------------- 4
class _ServerName:
    name = "server"  # all a round's start reads of the server's link


def _mac_cost(fed: Any, he: str, up: Any, payload: Any) -> float:
    """Seconds of one client's MAC work alone (its tag, and the check when it opens)."""
    from islands.crypto import ckks, mac, paillier

    half = fed.halves["c1"]
    key, dim = half.binding.mac_key(), fed.dim
    names = list(payload["contributors"])
    if he == "ckks":
        x = fed.models[1]["c1"].astype(np.float64)
        opened = ckks.decrypt_vector(half.context, payload["chunks"],
                                     dim + mac.real_tag_count(dim))
        t0 = time.perf_counter()
        mac.real_tags(key, 1, "c1", x)
        mac.real_deviation(key, 1, names, payload["weights"], opened[:dim], opened[dim:])
        return time.perf_counter() - t0
    plain = paillier.pack(np.asarray(fed.models[1]["c1"], np.float64) * 0.25, fed.agg.spec)
    modulus = (half.owner.secret_prime() if he == "ou" else int(half.public_key.n))
    t0 = time.perf_counter()
    mac.modular_tag(key, 1, "c1", 0.25, plain, modulus, lambda r: r)
    mac.modular_expected(key, 1, names, payload["weights"], payload["counters"], plain,
                         modulus)
    return time.perf_counter() - t0


def _upload_bytes(up: Any) -> int:
    return sum(len(c) for c in up) if isinstance(up, list) else len(up["blob"])


def bench_engines(dims: list[int]) -> list[dict[str, Any]]:
    from islands.crypto import mac
    from islands.hfl.server_audit import HEFederation

    rows = []
    for dim in dims:
        for he in ("ckks", "paillier", "ou"):
            fed = (HEFederation("ckks", dim=dim) if he == "ckks" else
                   HEFederation("paillier", dim=dim, options={"he": he}))
            t0 = time.perf_counter()
            fed.deal()
            keys = time.perf_counter() - t0
            fed.models[1] = {c: np.random.default_rng(1).normal(scale=0.1, size=dim)
                             .astype(np.float32) for c in fed.clients}
            agg = fed.server_half().start(_ServerName(), round=1, clients=list(fed.clients),
                                          weights=fed.n_train, dim=dim)
            ups, enc = {}, []
            for c in fed.clients:
                t0 = time.perf_counter()
                ups[c] = fed.halves[c].payload(fed.views[c], server="server", round=1,
                                               params=fed.models[1][c],
                                               base=np.zeros(dim), weight=agg.weights[c])
                enc.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            payload = fed.aggregate(agg, ups, list(fed.clients))
            add = time.perf_counter() - t0
            t0 = time.perf_counter()
            got = fed.halves["c1"].open(payload)
            dec = time.perf_counter() - t0
            err = float(np.max(np.abs(got - fed.mean(1, list(fed.clients)))))
            mac_s = _mac_cost(fed, he, ups["c1"], payload)
            rows.append({"dim": dim, "he": he, "key_dealing_s": keys,
                         "encrypt_s": float(np.mean(enc)), "add_4_s": add, "open_s": dec,
                         "mac_s": mac_s, "mac_share": mac_s / (float(np.mean(enc)) + dec),
                         "bytes_per_upload": _upload_bytes(ups["c0"]),
                         "ciphertexts": (len(ups["c0"]) if he == "ckks" else
                                         fed.agg.spec.ciphertexts_for(dim) + 1),
                         "mac_values": (mac.real_tag_count(dim) if he == "ckks" else 1),
                         "max_error": err})
    return rows


def print_engines(rows: list[dict[str, Any]]) -> None:
    print("\n4. One round of protect = [\"ckks\"] or [\"paillier\"] (he = paillier, ou), "
          "4 clients, the MAC included (crypto/mac.py)")
    for r in rows:
        print(f"  {r['dim']:>6} values  {r['he']:<9} upload {fmt_s(r['encrypt_s'])}  "
              f"server sum {fmt_s(r['add_4_s'])}  open {fmt_s(r['open_s'])}  "
              f"{fmt_bytes(r['bytes_per_upload'])}/upload ({r['ciphertexts']} ciphertexts)  "
              f"key dealing {fmt_s(r['key_dealing_s'])}  max error {r['max_error']:.1e}")
        print(f"  {'':>6}         {'':<9} MAC (tag + check) {fmt_s(r['mac_s'])} = "
              f"{100 * r['mac_share']:.1f}% of the client's upload + open; "
              f"{r['mac_values']} MAC value(s) per upload")


def main() -> None:
    logging.getLogger("islands").setLevel(logging.ERROR)  # the planned dropouts, per client
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="1,2,3,4")
    ap.add_argument("--clients", default=None)
    ap.add_argument("--dim", type=int, default=100_000)
    ap.add_argument("--plus", default=None, help="SecAgg+ rows for these N (e.g. 100,300,1000)")
    ap.add_argument("--flower-python", default=None,
                    help="Python of a venv with flwr, for peers/flower_secaggplus_round.py")
    args = ap.parse_args()
    only = {int(x) for x in args.only.split(",")}
    result: dict[str, Any] = {}
    if 1 in only:
        t1 = bench_table1(args.quick)
        print_table1(t1)
        result["table1"] = {str(k): v for k, v in t1.items()}
    if 2 in only:
        clients = ([int(x) for x in args.clients.split(",")] if args.clients
                   else [20, 100] if args.quick else [100, 500])
        rows = bench_secagg(clients, args.dim)
        print_secagg(rows)
        result["secagg"] = rows
    if args.plus:
        plus = bench_secaggplus([int(x) for x in args.plus.split(",")], args.dim,
                                flower_python=args.flower_python)
        print_secaggplus(plus)
        result["secaggplus"] = plus
    if 3 in only:
        rows3 = bench_dpsgd(args.quick)
        print_dpsgd(rows3)
        result["dpsgd"] = rows3
    if 4 in only:
        rows4 = bench_engines([2000] if args.quick else [2000, 54000])
        print_engines(rows4)
        result["engines"] = rows4
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
