"""Fine-tune a head over a frozen backbone, federated: only the head leaves each client.

    python examples/own-model/train_head.py

One organisation trains the backbone on public rows (here: digits 0-4), freezes it and
shares it; three clients then train a head for all ten digits on their own rows, under
secure aggregation. The trained model is saved as a state dict and loaded back.
"""

import sys
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

from islands.aggregation.secagg import SecureAggregation
from islands.hfl import FedAvg, FederatedModel, load_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import Backbone, head_model  # noqa: E402

X, y = load_digits(return_X_y=True)
X = (X / 16).astype(np.float32).reshape(-1, 1, 8, 8)
rng = np.random.default_rng(0)
order = rng.permutation(len(y))
public, private, test = order[:400], order[400:1400], order[1400:]

# the backbone: trained once, centrally, on public rows of five classes
torch.manual_seed(0)
backbone = Backbone()
pretrain = nn.Sequential(backbone, nn.Linear(128, 10))
rows = public[y[public] < 5]
optimiser = torch.optim.SGD(pretrain.parameters(), lr=0.1, momentum=0.9)
for _ in range(30):
    optimiser.zero_grad()
    loss = nn.functional.cross_entropy(pretrain(torch.from_numpy(X[rows])),
                                       torch.from_numpy(y[rows]))
    loss.backward()
    optimiser.step()

model = head_model(backbone)  # backbone frozen: its 1,320 values stay; the 1,290 of the head travel
parts = [(X[private[k::3]], y[private[k::3]]) for k in range(3)]
fm = FederatedModel(model, FedAvg(local_steps=10, batch_size=32, lr=0.1,
                                  aggregator=SecureAggregation()), epochs=5)
fm.fit(parts, test=(X[test], y[test]))
print(fm.model_.describe())
print(f"test accuracy: {fm.score(X[test], y[test]):.3f}")

out = Path("runs") / "own-model"
out.mkdir(parents=True, exist_ok=True)
fm.save(out / "head-model.pt")
again = load_model(out / "head-model.pt", head_model(Backbone()))
with torch.no_grad():
    pred = again(torch.from_numpy(X[test])).argmax(1).numpy()
assert (pred == fm.predict(X[test])).all()
print(f"saved to {out / 'head-model.pt'} and loaded back: the same predictions")
