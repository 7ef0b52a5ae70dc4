"""Deployment: one operating-system process per party over loopback with mutual TLS.

Each test writes a federation (certificates, federation and party files) with
:mod:`islands.deploy.local`, starts ``islands party --config FILE`` per party and checks
the results against the same protocol run in one process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")

from islands.deploy.config import load_party_config
from islands.deploy.launch import run_configured
from islands.deploy.local import start_parties, wait_parties, write_federation
from islands.errors import JobError, ValidationError

pytestmark = pytest.mark.timeout(300)

SRC = str(Path(__file__).resolve().parents[1] / "src")
ENV = {"PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def run(files: dict[str, Path], timeout: float = 120, **kwargs: Any) -> dict[str, Any]:
    procs = start_parties(files, env=ENV, **kwargs)
    done = wait_parties(procs, files, timeout)
    return done


def assert_ok(done: dict[str, Any]) -> None:
    bad = {n: f.log[-2000:] for n, f in done.items() if f.returncode != 0}
    assert not bad, bad


def correlated(n: int, p: int, q: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 4))
    return (z @ rng.normal(size=(4, p)) + rng.normal(size=(n, p)),
            z @ rng.normal(size=(4, q)) + rng.normal(size=(n, q)))


def test_swarm_cca_across_processes_equals_in_process(tmp_path: Path) -> None:
    from islands.cca import SwarmCCA

    X, Y = correlated(1500, 7, 5)
    np.save(tmp_path / "x.npy", X)
    np.savetxt(tmp_path / "y.csv", Y, delimiter=",")
    files = write_federation(tmp_path, "cca", {"x": {"data": "x.npy"}, "y": {"data": "y.csv"}},
                             options={"protocol": "paper", "perturb": False, "n_components": 3})
    assert_ok(run(files))
    ref = SwarmCCA(protocol="paper", n_components=3, perturb=False).fit(X, Y)
    np.testing.assert_array_equal(np.load(tmp_path / "out/x/weights.npy"), ref.x_weights_)
    np.testing.assert_array_equal(np.load(tmp_path / "out/y/weights.npy"), ref.y_weights_)
    record = json.loads((tmp_path / "out/x/party.json").read_text())
    other = json.loads((tmp_path / "out/y/party.json").read_text())
    assert record["run_id"] == other["run_id"]
    assert record["result"]["canonical_correlations"] == pytest.approx(
        ref.canonical_correlations_.tolist(), abs=0)


def test_secure_swarm_cca_across_processes_with_a_dealer(tmp_path: Path) -> None:
    from islands.cca import SwarmCCA

    X, Y = correlated(800, 6, 4)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y)
    files = write_federation(tmp_path, "cca", {"x": {"data": "x.npy"}, "y": {"data": "y.npy"},
                                               "dealer": {}},
                             options={"protocol": "secure", "n_components": 3})
    assert_ok(run(files))
    ref = SwarmCCA(n_components=3, perturb=False).fit(X, Y)
    x = json.loads((tmp_path / "out/x/party.json").read_text())["result"]
    assert x["canonical_correlations"] == pytest.approx(
        ref.canonical_correlations_.tolist(), abs=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "out/x/weights.npy"), ref.x_weights_,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "out/y/weights.npy"), ref.y_weights_,
                               rtol=1e-5, atol=1e-6)
    dealt = json.loads((tmp_path / "out/dealer/party.json").read_text())["result"]
    assert dealt == {"role": "dealer", "rows": 800, "s1": "x", "s2": "y", "s1_columns": 6,
                     "s2_columns": 4}


def test_federated_pca_across_processes_equals_in_process(tmp_path: Path) -> None:
    from islands.pca import FederatedPCA

    rng = np.random.default_rng(1)
    parts = [rng.normal(size=(300 + 50 * i, 6)) @ rng.normal(size=(6, 6)) for i in range(3)]
    for i, part in enumerate(parts):
        np.save(tmp_path / f"site{i + 1}.npy", part)
    parties: dict[str, dict[str, Any]] = {f"site{i + 1}": {"data": f"site{i + 1}.npy"}
                                          for i in range(3)}
    try:  # one site brings Parquet
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({f"c{j}": parts[2][:, j] for j in range(6)}),
                       tmp_path / "site3.parquet")
        parties["site3"] = {"data": "site3.parquet"}
    except ImportError:
        pass
    parties["publisher"] = {}
    options = {"publisher": "publisher", "mode": "elfedpca", "n_components": 2,
               "epsilon": 0.5, "delta": 1e-5, "noise_seed": 7}
    files = write_federation(tmp_path, "pca", parties, options=options)
    assert_ok(run(files))
    with pytest.warns(UserWarning, match="no differential-privacy guarantee"):
        ref = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="elfedpca", noise_seed=7).fit(parts)
    np.testing.assert_array_equal(np.load(tmp_path / "out/site2/components.npy"),
                                  ref.components_)
    np.testing.assert_array_equal(np.load(tmp_path / "out/publisher/projection.npy"),
                                  ref.published_)


def _digits_clients(folder: Path, clients: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(y))[:600]
    parts = [(X[i], y[i]) for i in np.array_split(order, clients)]
    for k, (a, b) in enumerate(parts):
        np.save(folder / f"c{k}.npy", np.column_stack([a, b]))
    return parts


HFL = {"server": "server", "features": 64, "classes": 10, "seed": 3,
       "model": {"kind": "mlp", "hidden": [16]},
       "strategy": {"name": "fedavg", "local_steps": 4, "batch_size": 32, "lr": 0.1}}


def _hfl_parties(clients: int) -> dict[str, dict[str, Any]]:
    return {"server": {"threads": 1},
            **{f"c{k}": {"data": f"c{k}.npy", "threads": 1} for k in range(clients)}}


def _in_process(parts: list[Any], epochs: int, aggregator: Any = None,
                strategy: Any = None) -> np.ndarray:
    from islands.hfl import FederatedModel
    from islands.hfl.strategy import FedAvg
    from islands.hfl.torch.models import ModelSpec

    spec = ModelSpec(kind="mlp", input_shape=(64,), n_outputs=10, hidden=(16,))
    fl = FederatedModel(spec, (strategy or FedAvg)(local_steps=4, batch_size=32, lr=0.1,
                                                   seed=3, aggregator=aggregator),
                        epochs=epochs, random_state=3, threads=1)
    fl.fit(parts, names=[f"c{k}" for k in range(len(parts))])
    return np.asarray(fl.params_)


def test_fedavg_three_clients_across_processes_equals_in_process(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    parts = _digits_clients(tmp_path)
    files = write_federation(tmp_path, "hfl", _hfl_parties(3), options={**HFL, "epochs": 2})
    assert_ok(run(files))
    expected = _in_process(parts, 2)
    np.testing.assert_array_equal(np.load(tmp_path / "out/server/params.npy"), expected)
    np.testing.assert_array_equal(np.load(tmp_path / "out/c1/params.npy"), expected)
    server = json.loads((tmp_path / "out/server/result.json").read_text())
    assert server["dropouts"] == [] and server["aggregations"] > 0


def test_scaffold_across_processes_equals_in_process(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from islands.hfl import Scaffold

    parts = _digits_clients(tmp_path)
    options = {**HFL, "epochs": 2, "strategy": {**HFL["strategy"], "name": "scaffold"}}
    files = write_federation(tmp_path, "hfl", _hfl_parties(3), options=options)
    assert_ok(run(files))
    expected = _in_process(parts, 2, strategy=Scaffold)
    # the model only: the control variate the global vector carries stays in the run
    np.testing.assert_array_equal(np.load(tmp_path / "out/server/params.npy"), expected)
    np.testing.assert_array_equal(np.load(tmp_path / "out/c2/params.npy"), expected)


def test_secure_aggregation_across_processes_signs_with_the_tls_identities(
        tmp_path: Path) -> None:
    # the clients' keys and survivor-set signatures are checked with the identity keys
    # each party received in its peers' hellos over mutual TLS
    pytest.importorskip("torch")
    from islands.aggregation.secagg import SecureAggregation

    parts = _digits_clients(tmp_path)
    files = write_federation(tmp_path, "hfl", _hfl_parties(3),
                             options={**HFL, "epochs": 1, "protect": ["secagg"]})
    assert_ok(run(files))
    expected = _in_process(parts, 1, aggregator=SecureAggregation())
    np.testing.assert_array_equal(np.load(tmp_path / "out/server/params.npy"), expected)
    server = json.loads((tmp_path / "out/server/result.json").read_text())
    assert server["dropouts"] == [] and server["aggregations"] > 0


def test_vertical_logistic_regression_across_processes_equals_in_process(
        tmp_path: Path) -> None:
    pytest.importorskip("gmpy2")
    from sklearn.datasets import load_breast_cancer

    from islands.vfl import VerticalLogisticRegression

    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    x_b, x_a = X[:, :10], X[:, 10:]
    ref = VerticalLogisticRegression(epochs=2, key_bits=1024, insecure_keys=True,
                                     random_state=0).fit(x_a, x_b, y)
    np.save(tmp_path / "a.npy", x_a)
    np.save(tmp_path / "b.npy", np.column_stack([x_b, y]))
    options = {"coordinator": "C", "active": "B", "model": "logistic", "epochs": 2,
               "key_bits": 1024, "insecure_keys": True, "seed": ref.plan_.seed}
    files = write_federation(tmp_path, "vfl", {"C": {}, "B": {"data": "b.npy"},
                                               "A": {"data": "a.npy"}}, options=options)
    assert_ok(run(files))
    np.testing.assert_array_equal(np.load(tmp_path / "out/A/theta.npy"), ref.coef_a_)
    theta_b = np.load(tmp_path / "out/B/theta.npy")
    np.testing.assert_array_equal(theta_b[:-1], ref.coef_b_)
    assert theta_b[-1] == ref.intercept_
    c = json.loads((tmp_path / "out/C/result.json").read_text())
    assert c["epoch_losses"] == pytest.approx(ref.loss_history_, abs=0)
    # each party wrote its own part; with them the inference flow of docs/vfl.md scores
    # new rows as the model trained in process does
    from islands.vfl.parts import ModelPart, combine

    part_a = ModelPart.load(tmp_path / "out/A/party-A.json")
    part_b = ModelPart.load(tmp_path / "out/B/party-B.json")
    assert (part_a.role, part_b.role, part_b.classes) == ("passive", "active", [0.0, 1.0])
    prob = combine([part_a.partial_score(x_a), part_b.partial_score(x_b)], part_b)
    z = x_a @ ref.coef_a_ + x_b @ ref.coef_b_ + ref.intercept_
    np.testing.assert_allclose(prob, 1 / (1 + np.exp(-z)), rtol=1e-12)


def _wait_for(path: Path, procs: dict[str, subprocess.Popen[str]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        assert all(p.poll() is None for p in procs.values()), "a party ended early"
        time.sleep(0.05)


def test_killed_server_stops_clients_by_name_and_a_restart_resumes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    parts = _digits_clients(tmp_path)
    epochs = 100  # long enough to be killed mid-run
    files = write_federation(tmp_path, "hfl", _hfl_parties(3), options={**HFL, "epochs": epochs},
                             settings={"liveness": 2.0, "timeout": 60})
    procs = start_parties(files, env=ENV)
    _wait_for(tmp_path / "out/server.checkpoints/server.ckpt", procs, 120)
    procs["server"].send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    done = wait_parties(procs, files, 60)
    assert time.monotonic() - t0 < 30
    for k in range(3):
        assert done[f"c{k}"].returncode == 1
        assert "'server' stopped responding" in " ".join(done[f"c{k}"].log.split())
        failed = json.loads((tmp_path / f"out/c{k}.failed.json").read_text())
        assert failed["peer"] == "server"
        assert not (tmp_path / f"out/c{k}").exists()  # nothing that looks complete
    assert not (tmp_path / "out/server").exists()

    assert_ok(run(files, timeout=240, extra_args=["--resume"]))
    server = json.loads((tmp_path / "out/server/result.json").read_text())
    assert server["resumed_from"] > 0
    np.testing.assert_array_equal(np.load(tmp_path / "out/server/params.npy"),
                                  _in_process(parts, epochs))
    assert not (tmp_path / "out/c0.failed.json").exists()


def test_killed_client_is_a_dropout(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    _digits_clients(tmp_path)
    files = write_federation(tmp_path, "hfl", _hfl_parties(3),
                             options={**HFL, "epochs": 80, "strategy": {
                                 **HFL["strategy"], "min_clients": 2}},  # type: ignore[dict-item]
                             settings={"liveness": 2.0, "timeout": 60})
    procs = start_parties(files, env=ENV)
    _wait_for(tmp_path / "out/server.checkpoints/server.ckpt", procs, 120)
    procs["c1"].send_signal(signal.SIGKILL)
    done = wait_parties(procs, files, 240)
    for name in ("server", "c0", "c2"):
        assert done[name].returncode == 0, done[name].log[-2000:]
    server = json.loads((tmp_path / "out/server/result.json").read_text())
    assert "c1" in {d["client"] for d in server["dropouts"]}
    assert server["rounds"] > 0


def test_config_errors_are_clear_and_come_before_connecting(tmp_path: Path) -> None:
    X, Y = correlated(50, 3, 2)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y)
    files = write_federation(tmp_path, "cca", {"x": {"data": "x.npy"}, "y": {"data": "y.npy"}},
                             options={"protocol": "paper", "n_components": 3})
    # y holds 2 columns, fewer than n_components: refused before any connection
    with pytest.raises(JobError, match="n_components = 3 exceeds the 2 columns of party 'y'"):
        run_configured(load_party_config(files["y"]))
    os.remove(tmp_path / "certs" / "x.key")
    with pytest.raises(JobError, match=r"\[tls\]: the key file .*x\.key does not exist"):
        load_party_config(files["x"])
    text = files["y"].read_text().replace('name = "y"', 'name = "z"')
    files["y"].write_text(text)
    with pytest.raises(JobError, match="'z' is not a party"):
        load_party_config(files["y"])
    fed = tmp_path / "federation.toml"
    fed.write_text(fed.read_text().replace('protocol = "cca"', 'protocol = "cca"\ncolour = 1'))
    with pytest.raises(JobError, match=r"unknown key\(s\) \['colour'\]"):
        load_party_config(files["y"])


def test_a_federation_file_that_is_not_toml_is_called_a_federation_file(
        tmp_path: Path) -> None:
    """A user lists one organisation twice in [parties] (TOML refuses the repeated key) and
    starts a party: the message names the federation file, not a "job file"."""
    files = write_federation(tmp_path, "cca", {"x": {}, "y": {}}, options={"protocol": "paper"})
    fed = tmp_path / "federation.toml"
    fed.write_text(fed.read_text().replace("[parties]\n", '[parties]\ny = "127.0.0.1:1"\n'))
    party = subprocess.run([sys.executable, "-m", "islands.cli", "party", "--config",
                            str(files["x"])], capture_output=True, text=True, timeout=120,
                           env={**os.environ, **ENV, "COLUMNS": "400"}, check=False)
    said = " ".join((party.stdout + party.stderr).split())
    assert party.returncode != 0, said
    assert f"federation file {fed} is not valid TOML" in said, said
    assert "job file" not in said, said
    files["x"].write_text("name = 'x'\n" + files["x"].read_text())  # 'name' twice
    with pytest.raises(JobError, match=r"^party file .*x\.toml is not valid TOML"):
        load_party_config(files["x"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threshold": 0}, r"\[cca\]: 'threshold' must be a float in \(0, 1\]; got 0 "
                           r"\(federation files accepted 0 before; .*remove it\)"),
        ({"rank_tol": 1.5}, r"\[cca\]: 'rank_tol' must be a float in \(0, 1\); got 1.5 "
                            r"\(federation files accepted values >= 1 before"),
        ({"reg": -1}, r"\[cca\]: 'reg' must be a float in \[0, inf\); got -1$"),
        ({"n_components": 1.0}, r"'n_components' must be an int in \[1, inf\); got 1.0$"),
        ({"perturb": 1}, r"'perturb' must be a bool or None; got 1$"),
        ({"timeout": 5}, r"\[cca\]: unknown key\(s\) \['timeout'\]; allowed: \['dealer', "
                         r"'n_components', 'perturb', 'protocol', 'rank_tol', 'reg', "
                         r"'threshold'\]"),
        ({"protocol": "secure"}, r"\[cca\]: secure Swarm CCA \(protocol = 'secure', the "
                                 r"default\) runs between two peers and a dealer: \[parties\] "
                                 r"must name three, the dealer 'dealer'"),
        ({}, r"Two peers alone can run Li and Du's published protocol, which lets each "
             r"rebuild the other's column space: set protocol = 'paper' in \[cca\]$"),
    ],
)
def test_cca_section_has_the_estimators_constraints(tmp_path: Path, options: dict[str, Any],
                                                    message: str) -> None:
    # [cca] is read by SccaConfig, as SwarmCCA's parameters are: a value SwarmCCA refuses
    # is refused here too, before the party reads its data or connects
    np.save(tmp_path / "x.npy", np.zeros((10, 3)))
    np.save(tmp_path / "y.npy", np.zeros((10, 2)))
    files = write_federation(tmp_path, "cca", {"x": {"data": "x.npy"}, "y": {"data": "y.npy"}},
                             options=options)
    with pytest.raises(JobError, match=message):
        run_configured(load_party_config(files["x"]))


PCA_OK = {"publisher": "pub", "mode": "secure", "n_components": 2, "epsilon": 0.5,
          "delta": 1e-5}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"epsilon": 1.5}, r"\[pca\]: 'epsilon' must be a float in \(0, 1\) \(the classic "
                           r"Gaussian mechanism is proven only for ε < 1\); got 1.5$"),
        ({"epsilon": 1}, r"\[pca\]: 'epsilon' must be a float in \(0, 1\) .*; got 1$"),
        ({"mode": "plain"}, r"\[pca\]: mode='plain' adds no noise: leave epsilon and delta as "
                            r"None, or choose a DP mode"),
        ({"mode": "plain", "epsilon": None, "delta": None, "noise_seed": 3},
         r"\[pca\]: The 'noise_seed' parameter of FederatedPCA must be None for "
         r"mode='plain' \(no noise\)"),
        ({"mode": None}, r"\[pca\]: missing key 'mode'.*'secure'.*FederatedPCA.*'plain'"),
        ({"delta": None}, r"\[pca\]: The 'delta' parameter of FederatedPCA must be a float "
                          r"in \(0, 1\)\. Got None instead\."),
        ({"mode": "magic"}, r"\[pca\]: 'mode' must be one of \['plain', 'elfedpca', "
                            r"'secure', 'dpdispca', 'central'\]; got 'magic'$"),
        ({"block_size": 0}, r"\[pca\]: 'block_size' must be an int in \[1, inf\); got 0$"),
        ({"timeout": 5}, r"\[pca\]: unknown key\(s\) \['timeout'\]; allowed: \['block_size', "
                         r"'delta', 'epsilon', 'mode', 'n_components', 'noise_seed', "
                         r"'publisher'\]"),
        ({"seed": 0}, r"\[pca\]: 'seed' no longer seeds the DP noise"),
        ({"n_components": None}, r"\[pca\]: missing key 'n_components'$"),
    ],
    ids=["eps-1.5", "eps-1", "plain-eps", "plain-noise-seed", "no-mode", "no-delta",
         "bad-mode", "block-0", "unknown", "seed", "no-k"],
)
def test_pca_section_has_the_estimators_constraints(tmp_path: Path, change: dict[str, Any],
                                                    message: str) -> None:
    # [pca] is read by PcaSettings, as FederatedPCA's parameters are: a value the estimator
    # refuses is refused here too, by every party, before it connects (no peer runs here;
    # a party that got past the check would fail on connect_timeout instead)
    np.save(tmp_path / "site1.npy", np.zeros((10, 3)))
    np.save(tmp_path / "site2.npy", np.zeros((10, 3)))
    options = {k: v for k, v in {**PCA_OK, **change}.items() if v is not None}
    files = write_federation(tmp_path, "pca", {"site1": {"data": "site1.npy"},
                                               "site2": {"data": "site2.npy"}, "pub": {}},
                             options=options, settings={"connect_timeout": 2})
    for party in ("site1", "pub"):
        with pytest.raises(JobError, match=message):
            run_configured(load_party_config(files[party]))


def test_pca_section_builds_the_estimators_settings(tmp_path: Path) -> None:
    from islands.deploy.protocols import prepare
    from islands.pca.config import PcaSettings

    np.save(tmp_path / "site1.npy", np.ones((10, 3)))
    np.save(tmp_path / "site2.npy", np.ones((10, 3)))
    options = {**PCA_OK, "mode": "central", "epsilon": 0.25, "delta": 1e-6, "noise_seed": 4,
               "block_size": 7}
    files = write_federation(tmp_path, "pca", {"site1": {"data": "site1.npy"},
                                               "site2": {"data": "site2.npy"}, "pub": {}},
                             options=options)
    role = prepare(load_party_config(files["site2"]), resume=False).role
    config = role.keywords["config"]  # type: ignore[attr-defined]
    settings = PcaSettings.build(mode="central", n_components=2, epsilon=0.25, delta=1e-6,
                                 noise_seed=4, block_size=7)
    assert (config.mode, config.n_components, config.epsilon, config.delta,
            config.noise_seed) == ("central", 2, 0.25, 1e-6, 4)
    assert config.sites == ("site1", "site2") and config.publisher == "pub"
    assert role.keywords["source"].block_size == settings.block_size  # type: ignore[attr-defined]


def test_cca_section_builds_the_estimators_settings(tmp_path: Path) -> None:
    from islands.cca.config import SccaConfig
    from islands.deploy.protocols import prepare

    X, Y = correlated(40, 3, 2)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y)
    options = {"protocol": "paper", "threshold": 1, "rank_tol": 0.5, "n_components": 2,
               "perturb": False}
    files = write_federation(tmp_path, "cca", {"x": {"data": "x.npy"}, "y": {"data": "y.npy"}},
                             options=options)
    role = prepare(load_party_config(files["x"]), resume=False).role
    settings = {k: v for k, v in role.keywords.items() if k != "Z"}  # type: ignore[attr-defined]
    config = SccaConfig.build(protocol="paper", threshold=1.0, rank_tol=0.5, n_components=2,
                              perturb=False)
    assert settings == {"other": "y", "perturb": config.perturbs,
                        **dict(config.model_dump(include={"n_components", "threshold", "reg",
                                                          "rank_tol"}))}
    assert type(settings["threshold"]) is float


def test_hfl_data_of_the_wrong_width_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    np.save(tmp_path / "c0.npy", np.zeros((20, 10)))
    np.save(tmp_path / "c1.npy", np.zeros((20, 65)))
    files = write_federation(tmp_path, "hfl", _hfl_parties(2), options={**HFL, "epochs": 1})
    with pytest.raises(JobError, match="has 9 feature columns; the federation's model takes 64"):
        run_configured(load_party_config(files["c0"]))


def test_a_one_row_hfl_client_is_refused_before_connecting(tmp_path: Path) -> None:
    """Before: the client joined and the server refused it at the joins, after every client
    had sent its row count; now it refuses itself, naming itself and the minimum."""
    pytest.importorskip("torch")
    np.save(tmp_path / "c0.npy", np.zeros((40, 65)))
    np.save(tmp_path / "c1.npy", np.zeros((1, 65)))
    files = write_federation(tmp_path, "hfl", _hfl_parties(2), options={**HFL, "epochs": 1},
                             settings={"connect_timeout": 5.0})
    with pytest.raises(JobError, match=r"c1\.toml: client 'c1' has 1 training row; FedAvg "
                                       r"trains every client on mini-batches of 32 rows, so "
                                       r"each client needs at least 32"):
        run_configured(load_party_config(files["c1"]))


def test_vertical_options_and_labels_are_checked(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.zeros((30, 2)))
    np.save(tmp_path / "b.npy", np.column_stack([np.zeros((30, 2)), np.arange(30) % 3]))
    files = write_federation(tmp_path, "vfl", {"C": {}, "B": {"data": "b.npy"},
                                               "A": {"data": "a.npy"}},
                             options={"coordinator": "C", "active": "B", "key_bits": 1024,
                                      "insecure_keys": True})
    with pytest.raises(JobError, match="exactly two classes in the labels; got 3"):
        run_configured(load_party_config(files["B"]))
    np.save(tmp_path / "a.npy", np.full((30, 2), 2.0**40))
    with pytest.raises(JobError, match="the data of party 'A'"):
        run_configured(load_party_config(files["A"]))
    files = write_federation(tmp_path / "two", "vfl", {"C": {}, "B": {}},
                             options={"coordinator": "C", "active": "C"})
    with pytest.raises(JobError, match="must differ"):
        run_configured(load_party_config(files["B"]))


def test_certs_command(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from islands.cli import app

    result = CliRunner().invoke(app, ["certs", "--parties", "bank,hospital", "--out",
                                      str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in tmp_path.iterdir()} == {
        "ca.pem", "ca.key", "bank.pem", "bank.key", "hospital.pem", "hospital.key"}
    again = CliRunner().invoke(app, ["certs", "--parties", "bank", "--out", str(tmp_path)])
    assert again.exit_code == 2 and "refusing to overwrite" in again.output
    bad = CliRunner().invoke(app, ["certs", "--parties", "bank,bank", "--out",
                                   str(tmp_path / "x")])
    assert bad.exit_code == 2 and "duplicate party name" in bad.output


@pytest.mark.parametrize(("change", "key"), [
    (lambda text: text.replace("n_components = 2", "n_components = 3"), "'pca.n_components'"),
    (lambda text: "\n".join(line for line in text.splitlines()
                            if not line.startswith("site2 =")), "'parties.site2'"),
], ids=["option", "members"])
def test_a_different_federation_file_is_explained_to_every_party(
        tmp_path: Path, change: Any, key: str) -> None:
    # site3 holds another copy of the federation file; every party must say so, quickly
    # (connect_timeout is far longer than the test's deadline)
    rng = np.random.default_rng(2)
    parties = {}
    for i in (1, 2, 3):
        np.save(tmp_path / f"site{i}.npy", rng.normal(size=(60, 4)))
        parties[f"site{i}"] = {"data": f"site{i}.npy"}
    files = write_federation(tmp_path, "pca", parties, settings={"connect_timeout": 300},
                             options={"n_components": 2, "mode": "plain",
                                      "publisher": "site1"})
    fed = tmp_path / "federation.toml"
    (tmp_path / "other.toml").write_text(change(fed.read_text()))
    files["site3"].write_text(files["site3"].read_text().replace(
        '"federation.toml"', '"other.toml"'))
    done = run(files, timeout=100)
    digests = {load_party_config(files[p]).federation.digest[:12] for p in ("site1", "site3")}
    for party, finished in done.items():
        log = " ".join(finished.log.split())
        assert finished.returncode == 1, (party, log)
        assert "the federation files of" in log and "differ" in log, (party, log)
        assert f"the keys that differ: {key}" in log, (party, log)
        assert all(d in log for d in digests), (party, log)
        assert "'site3'" in log and "could not reach" not in log, (party, log)
        failed = json.loads((tmp_path / f"out/{party}.failed.json").read_text())
        assert "differ" in failed["error"] and failed["step"] == "hello"


def test_help_texts_keep_their_brackets() -> None:
    # rich markup would swallow "[parties]": every command's help shows its brackets
    import re

    import typer
    from typer.testing import CliRunner

    from islands.cli import app

    def commands(cmd: Any, path: list[str]) -> Any:
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from commands(sub, [*path, name])

    checked = 0
    for path, cmd in commands(typer.main.get_command(app), []):
        texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
        wanted = {m for t in texts for m in re.findall(r"\[[^\]\s]+\]", t)}
        result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        shown = " ".join(result.output.split())
        for text in sorted(wanted):
            assert text.replace("\\[", "[") in shown, (path, text)
            checked += 1
    assert checked >= 2
    out = subprocess.run([sys.executable, "-m", "islands.cli", "certs", "--help"],
                         capture_output=True, text=True, env={**os.environ, **ENV,
                                                              "COLUMNS": "200"}, timeout=60)
    assert "federation file's [parties]" in out.stdout, out.stdout


def test_insecure_flag_is_refused_off_loopback(tmp_path: Path) -> None:
    from islands.runtime.grpc_transport import GrpcTransport

    with pytest.raises(ValidationError, match="loopback tests only"):
        GrpcTransport("a", {"a": "0.0.0.0:1", "b": "10.0.0.2:1"}, insecure=True)


# ------------------------------------------------------------------ network namespaces
def _netns_available() -> bool:
    if shutil.which("ip") is None or os.geteuid() != 0:
        return False
    probe = f"isl-probe-{uuid.uuid4().hex[:6]}"
    ok = subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ok


@pytest.mark.skipif(not _netns_available(), reason="needs root and `ip netns`")
def test_parties_in_separate_network_namespaces(tmp_path: Path) -> None:
    """Two hosts joined by a veth pair: the parties reach each other only over it."""
    from islands.cca import SwarmCCA
    from islands.deploy.local import _toml

    tag = uuid.uuid4().hex[:5]
    ns = {"x": f"isl-x-{tag}", "y": f"isl-y-{tag}"}
    ip = {"x": "10.213.7.1", "y": "10.213.7.2"}
    veth = {"x": f"vx{tag}", "y": f"vy{tag}"}

    def sh(*cmd: str) -> None:
        subprocess.run(cmd, check=True, capture_output=True)

    try:
        for name in ("x", "y"):
            sh("ip", "netns", "add", ns[name])
        sh("ip", "link", "add", veth["x"], "type", "veth", "peer", "name", veth["y"])
        for name in ("x", "y"):
            sh("ip", "link", "set", veth[name], "netns", ns[name])
            sh("ip", "-n", ns[name], "addr", "add", f"{ip[name]}/24", "dev", veth[name])
            sh("ip", "-n", ns[name], "link", "set", veth[name], "up")
            sh("ip", "-n", ns[name], "link", "set", "lo", "up")
        X, Y = correlated(800, 5, 4)
        np.save(tmp_path / "x.npy", X)
        np.save(tmp_path / "y.npy", Y)
        files = write_federation(tmp_path, "cca", {"x": {"data": "x.npy"},
                                                   "y": {"data": "y.npy"}},
                                 options={"protocol": "paper", "perturb": False})
        fed = tmp_path / "federation.toml"
        fed.write_text(_toml({"name": "netns", "protocol": "cca",
                              "parties": {n: f"{ip[n]}:50051" for n in ("x", "y")},
                              "cca": {"protocol": "paper", "perturb": False}}))
        procs = {}
        for name in ("x", "y"):
            log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115
            procs[name] = subprocess.Popen(
                ["ip", "netns", "exec", ns[name], sys.executable, "-m", "islands.cli",
                 "party", "--config", str(files[name])],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **ENV},
                cwd=str(tmp_path))
            log.close()
        done = wait_parties(procs, files, 120)
        assert_ok(done)
        ref = SwarmCCA(protocol="paper", perturb=False).fit(X, Y)
        np.testing.assert_array_equal(np.load(tmp_path / "out/x/weights.npy"), ref.x_weights_)
    finally:
        for name in ("x", "y"):
            subprocess.run(["ip", "netns", "del", ns[name]], capture_output=True)


_TEARDOWN_PROBE = """
import atexit, os, sys
from pathlib import Path

marks, config = Path(sys.argv[1]), sys.argv[2]


class Teardown:
    # a module-level object of __main__: only the interpreter's teardown finalizes it
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.write = os.write

    def __del__(self):
        self.write(self.fd, b"torn down")


probe = Teardown(marks / "teardown")
atexit.register(lambda: (marks / "exit-handlers").write_text("ran"))
from islands.cli import main

sys.argv = ["islands", "party", "--config", config]
main()
"""


def test_a_party_process_leaves_without_the_interpreters_teardown(tmp_path: Path) -> None:
    # a party's process ends as soon as its result is written: tearing down the ~2,000
    # modules a party imports took about a second of CPU per process, and the 51
    # parties of a federation on one machine left a minute after their results. The
    # exit handlers still run (logs flushed, worker pools stopped).
    np.save(tmp_path / "v.npy", np.arange(3.0))
    files = write_federation(tmp_path, "securesum", {"a": {"data": "v.npy"},
                                                      "b": {"data": "v.npy"}})
    procs = start_parties(files, env=ENV, only=["b"])
    with open(tmp_path / "a.log", "w", encoding="utf-8") as log:
        probe = subprocess.Popen([sys.executable, "-c", _TEARDOWN_PROBE, str(tmp_path),
                                  str(files["a"])], stdout=log, stderr=subprocess.STDOUT,
                                 cwd=tmp_path, env={**os.environ, **ENV})
    try:
        assert probe.wait(timeout=120) == 0, (tmp_path / "a.log").read_text()
    finally:
        if probe.poll() is None:
            probe.kill()
    assert_ok(wait_parties(procs, files, 120))
    np.testing.assert_array_equal(np.load(tmp_path / "out/a/total.npy"), 2 * np.arange(3.0))
    assert (tmp_path / "exit-handlers").read_text() == "ran"
    assert (tmp_path / "teardown").read_bytes() == b""


# ---------------------------------------------------------------- a user's model, deployed
USER_MODELS = """
import torch
from torch import nn

def net(width=16, classes=10):
    return nn.Sequential(nn.Linear(64, width), nn.BatchNorm1d(width), nn.ReLU(),
                         nn.Linear(width, classes))

def frozen(width=16, classes=10):
    model = net(width, classes)
    nn.init.constant_(model[0].weight, 0.01)  # a "pretrained" first layer, frozen
    model[0].requires_grad_(False)
    return model
"""


def _user_models(folder: Path, code: str = USER_MODELS) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "deployed_models.py").write_text(code)
    return {"PYTHONPATH": os.pathsep.join([str(folder), SRC])}


def test_a_factory_model_across_processes_equals_in_process(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from islands.hfl import FederatedModel
    from islands.hfl.strategy import FedAvg

    parts = _digits_clients(tmp_path)
    env = _user_models(tmp_path / "code")
    options = {**HFL, "epochs": 1, "protect": ["secagg"],
               "model": {"factory": "deployed_models:net", "args": {"width": 12}}}
    files = write_federation(tmp_path, "hfl", _hfl_parties(3), options=options)
    assert_ok(wait_parties(start_parties(files, env={**ENV, **env}), files, 120))
    import sys as _sys

    _sys.path.insert(0, str(tmp_path / "code"))
    try:
        import deployed_models  # type: ignore[import-not-found]

        from islands.aggregation.secagg import SecureAggregation

        fl = FederatedModel(lambda: deployed_models.net(width=12),
                            FedAvg(local_steps=4, batch_size=32, lr=0.1, seed=3,
                                   aggregator=SecureAggregation()),
                            epochs=1, random_state=3, threads=1)
        fl.fit(parts, names=[f"c{k}" for k in range(len(parts))])
    finally:
        _sys.path.remove(str(tmp_path / "code"))
        _sys.modules.pop("deployed_models", None)
    # the trained parameters and the batch-norm statistics, as in one process
    np.testing.assert_array_equal(np.load(tmp_path / "out/server/params.npy"), fl.params_)
    assert fl.params_.size == 64 * 12 + 12 + 12 * 2 + 12 * 10 + 10 + 2 * 12


def test_parties_that_built_different_initial_models_never_start(tmp_path: Path) -> None:
    # each party builds the factory's module from its own code; a frozen layer never
    # travels, so one that differs (another version of the package) would go unnoticed
    pytest.importorskip("torch")
    _digits_clients(tmp_path, clients=2)
    same = _user_models(tmp_path / "a")
    other = _user_models(tmp_path / "b", USER_MODELS.replace("0.01)", "0.02)"))
    options = {**HFL, "epochs": 1,
               "model": {"factory": "deployed_models:frozen", "args": {"width": 12}}}
    files = write_federation(tmp_path, "hfl", _hfl_parties(2), options=options,
                             settings={"connect_timeout": 20.0})
    procs = start_parties(files, env={**ENV, **same}, only=["server", "c0"])
    procs.update(start_parties(files, env={**ENV, **other}, only=["c1"]))
    done = wait_parties(procs, files, 120)
    assert all(f.returncode != 0 for f in done.values())
    log = " ".join(" ".join(f.log.split()) for f in done.values())
    assert "'hfl.model (built here)'" in log and "install the same code at every party" in log
