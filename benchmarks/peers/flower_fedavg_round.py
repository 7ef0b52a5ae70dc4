"""Peer benchmark: Flower's simulation engine on real-compute FedAvg (MLP, Fashion-MNIST).

N clients each hold one IID shard of the Fashion-MNIST train rows and train the MLP
784-200-10 (torch, one thread per client, ``num_cpus=1``) for one local epoch at batch 32,
plain SGD at lr 0.05; FedAvg weights by rows; R rounds. After each round the server
evaluates the global model on the 10,000 test rows (outside the round's time). Run it in
Flower's own virtual environment (it imports neither islands nor anything of the repo):

    python3 -m venv /work/flwr-venv
    /work/flwr-venv/bin/pip install "flwr[simulation]==1.42.*" numpy torch==2.13.0
    FLWR_TELEMETRY_ENABLED=0 /work/flwr-venv/bin/python flower_fedavg_round.py DATA.npz [ROUNDS]

DATA.npz (written by ``benchmarks/flower.py:export_fedavg_data`` from islands' loader, so
both frameworks train on the same shards from the same initial weights) holds
``X`` (uint8, train rows grouped shard by shard), ``y``, ``offsets`` (N + 1 row offsets:
client k owns rows offsets[k]:offsets[k+1]), ``X_test``, ``y_test`` and ``w0``..``w3``
(the initial weights and biases of the two Linear layers, torch's layout). The number of
clients N is len(offsets) - 1. Options (after the path): ROUNDS (default 3), then
``key=value`` for lr, batch, epochs.

It prints ``ROUND {json}`` as each round ends, then one line ``RESULT {json}``: seconds of
each round (training and aggregation, from sending the round's instructions to the
aggregate; round 1 includes Ray's start-up of the client actors), accuracy on the test set
after each round (and of the initial model), and the whole-script time.
"""
import json
import os
import sys
import tempfile
import time

T0 = time.perf_counter()
import numpy as np  # noqa: E402
import torch  # noqa: E402
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

SRC = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
OPTS = {"lr": 0.05, "batch": 32, "epochs": 1}
OPTS.update({k: type(OPTS[k])(v) for k, v in (a.split("=", 1) for a in sys.argv[3:])})
LR, BATCH, EPOCHS = float(OPTS["lr"]), int(OPTS["batch"]), int(OPTS["epochs"])

# the arrays as .npy beside each other, so every client memory-maps its shard
DIR = tempfile.mkdtemp(prefix="flwr-fedavg-")
with np.load(SRC) as npz:
    for name in npz.files:
        np.save(os.path.join(DIR, name + ".npy"), npz[name])
    N = len(npz["offsets"]) - 1
    W0 = [npz[f"w{i}"] for i in range(4)]


def arr(name: str) -> np.ndarray:
    return np.load(os.path.join(DIR, name + ".npy"), mmap_mode="r")


def model(weights: list[np.ndarray]) -> torch.nn.Module:
    net = torch.nn.Sequential(torch.nn.Linear(784, 200), torch.nn.ReLU(),
                              torch.nn.Linear(200, 10))
    with torch.no_grad():
        for p, w in zip(net.parameters(), weights, strict=True):
            p.copy_(torch.from_numpy(np.asarray(w, np.float32)))
    return net


client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    k = int(context.node_config["partition-id"])
    off = arr("offsets")
    X = torch.from_numpy(np.asarray(arr("X")[off[k]:off[k + 1]], np.float32) / 255)
    y = torch.from_numpy(np.asarray(arr("y")[off[k]:off[k + 1]], np.int64))
    net = model(msg.content["arrays"].to_numpy_ndarrays())
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(int(msg.content["config"]["server-round"]) * 100_003 + k)
    for _ in range(EPOCHS):
        order = torch.randperm(len(y), generator=gen)
        for s in range(0, len(y), BATCH):
            idx = order[s:s + BATCH]
            opt.zero_grad()
            loss_fn(net(X[idx]), y[idx]).backward()
            opt.step()
    out = [p.detach().numpy() for p in net.parameters()]
    content = RecordDict({"arrays": ArrayRecord(out),
                          "metrics": MetricRecord({"num-examples": len(y)})})
    return Message(content=content, reply_to=msg)


marks: dict[int, list[float]] = {}
accuracy: dict[int, float] = {}


class TimedFedAvg(FedAvg):
    def configure_train(self, rnd, arrays, config, grid):  # type: ignore[override]
        marks[rnd] = [time.perf_counter()]
        return super().configure_train(rnd, arrays, config, grid)

    def aggregate_train(self, rnd, replies):  # type: ignore[override]
        out = super().aggregate_train(rnd, replies)
        marks[rnd].append(time.perf_counter())
        print("ROUND " + json.dumps({"round": rnd, "seconds": round(marks[rnd][1] - marks[rnd][0],
                                                                   3)}), flush=True)
        return out


def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord:
    net = model(arrays.to_numpy_ndarrays())
    with torch.no_grad():
        pred = net(torch.from_numpy(np.asarray(arr("X_test"), np.float32) / 255)).argmax(1)
    accuracy[rnd] = float((pred.numpy() == np.asarray(arr("y_test"))).mean())
    return MetricRecord({"accuracy": accuracy[rnd]})


server = ServerApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    strategy = TimedFedAvg(fraction_train=1.0, fraction_evaluate=0.0,
                           min_train_nodes=N, min_available_nodes=N)
    strategy.start(grid=grid, num_rounds=ROUNDS, initial_arrays=ArrayRecord(W0),
                   evaluate_fn=evaluate)


run_simulation(server_app=server, client_app=client, num_supernodes=N, backend_name="ray",
               backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
for name in os.listdir(DIR):
    os.remove(os.path.join(DIR, name))
os.rmdir(DIR)
per_round = [round(marks[r][1] - marks[r][0], 3) for r in sorted(marks)]
print("RESULT " + json.dumps({
    "clients": N, "rounds": ROUNDS, "lr": LR, "batch": BATCH, "epochs": EPOCHS,
    "seconds_per_round": per_round, "accuracy": [accuracy[r] for r in sorted(accuracy)],
    "torch": torch.__version__, "script_seconds": round(time.perf_counter() - T0, 2)}))
