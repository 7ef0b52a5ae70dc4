"""Peer benchmark: Flower's SecAgg+ (``SecAggPlusWorkflow`` + ``secaggplus_mod``) rounds.

N clients each hold DIM float32 parameters and "train" by adding 0.001 (no compute), so
the time measured is the protocol's and the framework's. Flower's simulation engine
(Ray); the server runs Flower's ``DefaultWorkflow`` with ``SecAggPlusWorkflow`` as its fit
workflow and the legacy ``FedAvg``; the clients are ``NumPyClient``s behind
``secaggplus_mod``. Run it in Flower's own virtual environment:

    python3 -m venv /work/flwr-venv
    /work/flwr-venv/bin/pip install "flwr[simulation]==1.42.*" numpy torch==2.13.0
    FLWR_TELEMETRY_ENABLED=0 /work/flwr-venv/bin/python flower_secaggplus_round.py \\
        N DIM [K [THRESHOLD [DROPOUT [ROUNDS]]]]

K: ``num_shares`` (an int: that many shares, the client and its K - 1 neighbours; an even
K becomes K + 1, as Flower's server does, whose clients would otherwise fail every round;
with a dot, a fraction of N; 0: no SecAgg+, plain FedAvg through the same workflow, the
baseline; default 10, so 11). THRESHOLD: ``reconstruction_threshold`` (int, or a
fraction of K with a dot; empty or absent: 2/3 of K as a fraction, the ratio of Flower's
example, 3 shares and 2 to rebuild). DROPOUT: fraction of the clients (the first
⌊DROPOUT·N⌋ partitions) that fail in the collect-masked-vectors stage, after sharing their
keys and before uploading: their ``fit`` raises, so the client replies with an error and
the server rebuilds their keys from the survivors' shares (default 0). ROUNDS: default 3.

It prints ``ROUND {json}`` as each round ends, then one line ``RESULT {json}``: seconds of
each round (from ``configure_fit`` to the end of the fit workflow; round 1 includes Ray's
start-up of the client actors), the rounds that SecAgg+ halted (``halted_rounds``: Flower
stops a round when some client keeps fewer than THRESHOLD live neighbours; that round's
model is not updated), the results and failures of the last aggregated round, the largest
error of the last aggregate against 0.001 × the rounds aggregated, and the whole-script
time. Each client weighs 1 example and ``max_weight=1.0`` (Flower's default 1000 scales
params by 1/1000 before its 2^22-level quantization over [-8, 8], leaving an error of
~1e-3 on these values; the cost is the same).
"""
import json
import sys
import time

T0 = time.perf_counter()
import numpy as np  # noqa: E402
from flwr.client import ClientApp, NumPyClient  # noqa: E402
from flwr.client.mod import secaggplus_mod  # noqa: E402
from flwr.common import Context, ndarrays_to_parameters, parameters_to_ndarrays  # noqa: E402
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig  # noqa: E402
from flwr.server.strategy import FedAvg  # noqa: E402
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402


def number(s: str) -> int | float:
    return float(s) if "." in s else int(s)


argv = sys.argv[1:] + [""] * 6
N, DIM = int(argv[0]), int(argv[1])
K_ASKED = number(argv[2] or "10")
# Flower's server turns an even int num_shares into the next odd number after sending the
# even one to the clients, whose share_keys stage then fails (IndexError) on every client:
# every round halts. Ask for the odd number it means to use (num_shares counts the client
# itself: K = 11 is 10 neighbours).
K = K_ASKED + 1 if isinstance(K_ASKED, int) and K_ASKED and K_ASKED % 2 == 0 else K_ASKED
THRESHOLD = number(argv[3]) if argv[3] else 2 / 3
DROPOUT = float(argv[4] or 0)
ROUNDS = int(argv[5] or 3)
DROPPED = int(DROPOUT * N)


class Client(NumPyClient):
    def __init__(self, k: int) -> None:
        self.k = k

    def fit(self, parameters, config):  # type: ignore[no-untyped-def]
        if self.k < DROPPED:
            raise RuntimeError(f"client {self.k} drops out before uploading")
        return [parameters[0] + np.float32(0.001)], 1, {}


def client_fn(context: Context):  # type: ignore[no-untyped-def]
    return Client(int(context.node_config["partition-id"])).to_client()


client = ClientApp(client_fn=client_fn, mods=[secaggplus_mod] if K else [])
marks: dict[int, list[float]] = {}
completed: set[int] = set()
final: dict[str, float] = {}


class TimedFedAvg(FedAvg):
    def configure_fit(self, server_round, parameters, client_manager):  # type: ignore[no-untyped-def]
        marks[server_round] = [time.perf_counter()]
        return super().configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round, results, failures):  # type: ignore[no-untyped-def]
        out = super().aggregate_fit(server_round, results, failures)
        completed.add(server_round)
        final.update(results=len(results), failures=len(failures))
        if out[0] is not None:
            w = parameters_to_ndarrays(out[0])[0]
            final["max_error"] = float(np.abs(w - np.float32(0.001) * len(completed)).max())
        return out

    def configure_evaluate(self, server_round, parameters, client_manager):  # type: ignore[no-untyped-def]
        marks[server_round].append(time.perf_counter())  # after the fit workflow, halted or not
        print("ROUND " + json.dumps({"round": server_round, "seconds": round(
            marks[server_round][1] - marks[server_round][0], 3),
            "halted": server_round not in completed}), flush=True)
        return super().configure_evaluate(server_round, parameters, client_manager)


server = ServerApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    strategy = TimedFedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=N,
                           min_available_clients=N,
                           initial_parameters=ndarrays_to_parameters([np.zeros(DIM, np.float32)]))
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=ROUNDS),
                           strategy=strategy)
    fit = (SecAggPlusWorkflow(num_shares=K, reconstruction_threshold=THRESHOLD, max_weight=1.0)
           if K else None)
    DefaultWorkflow(fit_workflow=fit)(grid, legacy)


run_simulation(server_app=server, client_app=client, num_supernodes=N, backend_name="ray")
per_round = [round(marks[r][1] - marks[r][0], 3) for r in sorted(marks)]
print("RESULT " + json.dumps({
    "clients": N, "dim": DIM, "num_shares": K, "num_shares_asked": K_ASKED,
    "reconstruction_threshold": THRESHOLD,
    "dropout": DROPOUT, "dropped": DROPPED, "rounds": ROUNDS, "secure": bool(K),
    "seconds_per_round": per_round, "halted_rounds": sorted(set(marks) - completed), **final,
    "script_seconds": round(time.perf_counter() - T0, 2)}))
