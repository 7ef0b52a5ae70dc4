"""SecureBoost's label leakage to a passive party (issue 39): the attacks and the hardening."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from typer.testing import CliRunner

from islands.crypto import heu
from islands.errors import ValidationError
from islands.runtime import Record, run_local
from islands.vfl.secureboost import protocol
from islands.vfl.secureboost.audit import (
    SecureBoostAuditReport,
    auc,
    audit_data,
    audit_secureboost,
    best_naming_accuracy,
    co_membership_scores,
    label_by_rate,
    name_by_prior,
    passive_view,
)
from islands.vfl.secureboost.config import BoostConfig

needs_heu = pytest.mark.skipif(not heu.available(), reason="sf-heu is not importable here")


def plan(**settings: Any) -> BoostConfig:
    values = {"objective": "binary", "n_estimators": 3, "he": "none", **settings}
    return BoostConfig.build(None, **values)


def received(passive_x: Any, active_x: Any, y: Any, config: BoostConfig,
             keep_payloads: bool = True) -> list[Record]:
    roles = {"B": lambda p: protocol.active(p, active_x, y, passive=["A"], config=config),
             "A": lambda p: protocol.passive(p, passive_x, active="B", config=config)}
    run = run_local(roles, timeout=300, keep_payloads=keep_payloads)
    return run.transcript.received_by("A")


@cache
def breast_cancer_report() -> SecureBoostAuditReport:
    data = audit_data("breast_cancer")
    return audit_secureboost(data.passive, data.active, data.y, n_estimators=5, seed=0)


def test_the_first_tree_gives_the_labels_away_on_the_faithful_protocol() -> None:
    report = breast_cancer_report()
    faithful = report.settings[0]
    assert faithful.name == "faithful" and faithful.trees_hidden == 0
    first = faithful.curve[0]
    assert first.trees == 1
    # 8 known labels; the majority class scores 0.63 and AUC 0.5 on these rows
    assert report.known_labels == 8
    assert first.accuracy > report.prior_accuracy + 0.2
    assert first.auc > 0.9
    # with no label at all, the first split named from the positive rate alone
    assert faithful.zero_knowledge_accuracy is not None
    assert faithful.zero_knowledge_accuracy > report.prior_accuracy + 0.2
    assert faithful.naming_upper_bound is not None
    assert faithful.zero_knowledge_accuracy <= faithful.naming_upper_bound
    assert faithful.hidden_as_planned


def test_a_complete_secure_tree_reaches_the_passive_party_without_rows() -> None:
    data = audit_data("breast_cancer")
    records = received(data.passive, data.active, data.y.astype(float),
                       plan(active_first_trees=1))
    tree = -1
    shown: dict[int, int] = {}
    for record in records:
        msg = record.payload
        if isinstance(msg, protocol.TreeStart):
            tree = msg.tree
            if tree == 0:
                assert msg.rows.size == 0 and msg.values == []
        elif isinstance(msg, protocol.Level):
            shown[tree] = shown.get(tree, 0) + int(msg.node_of.size > 0)
            if tree == 0:
                assert msg.node_of.size == 0 and msg.nodes == []
        elif isinstance(msg, protocol.Splits) and tree == 0:
            raise AssertionError("the passive party was asked to split the first tree")
    assert shown[0] == 0 and shown[1] > 0 and shown[2] > 0
    # and so the attack after one tree is the majority class, AUC 0.5, exactly
    hardened = breast_cancer_report().settings[1]
    assert (hardened.active_first_trees, hardened.trees_hidden) == (1, 1)
    assert hardened.curve[0].accuracy == breast_cancer_report().prior_accuracy
    assert hardened.curve[0].auc == 0.5
    assert hardened.hidden_as_planned and hardened.zero_knowledge_tree == 1


def test_hiding_the_top_level_still_shows_its_partition_at_the_next() -> None:
    data = audit_data("breast_cancer")
    config = plan(active_top_levels=1)
    view = passive_view(received(data.passive, data.active, data.y.astype(float), config),
                        "A", data.y.size)
    for tree in view.trees:
        assert tree.hidden_levels == (0,)
        depth, node_of = tree.levels[0]
        assert depth == 1 and np.unique(node_of).size == 2  # the active party's root split
    report = breast_cancer_report()
    top = report.settings[2]
    assert top.active_top_levels == 1 and top.levels_hidden == 5
    assert top.curve[0].accuracy > report.prior_accuracy + 0.2


@needs_heu
def test_the_passive_party_receives_the_same_instance_spaces_under_encryption() -> None:
    data = audit_data("synthetic", n_samples=120, seed=3)
    views = {}
    for he in ("none", "ou"):
        config = plan(he=he, key_bits=1024, insecure_keys=True, n_estimators=2, max_depth=2)
        records = received(data.passive, data.active, data.y.astype(float), config)
        views[he] = [(type(m).__name__, m.rows.tolist() if isinstance(m, protocol.TreeStart)
                      else (m.depth, m.node_of.tolist(), m.nodes)
                      if isinstance(m, protocol.Level) else m.items)
                     for m in (r.payload for r in records if r.tag == "boost")
                     if not isinstance(m, protocol.Finish)]
    assert views["ou"] == views["none"]
    assert any(kind == "Level" for kind, _ in views["ou"])


def test_the_view_needs_the_payloads() -> None:
    data = audit_data("synthetic", n_samples=60)
    records = received(data.passive, data.active, data.y.astype(float), plan(),
                       keep_payloads=False)
    with pytest.raises(LookupError, match="keep_payloads"):
        passive_view(records, "A", 60)
    with pytest.raises(ValidationError, match="keep_payloads"):
        passive_view([], "A", 60)


def test_the_attacks_maths() -> None:
    y = np.array([1, 1, 1, 0, 0, 1, 0, 0, 0, 0], dtype=float)
    parts = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1])
    # the 4-row part is nearer π·n = 4 rows: it is named positive
    assert name_by_prior(parts, 0.4).tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    assert best_naming_accuracy(parts, y) == 0.8
    known = np.zeros(10, dtype=bool)
    known[[0, 9]] = True
    scores = co_membership_scores([None, parts], known, y, prior=0.4)
    assert np.all(scores[0] == 0.4)  # nothing seen: the prior
    # part 0 holds one known positive: (1 + 0.4) / 2; part 1 one known negative
    assert np.allclose(scores[1], np.where(parts == 0, 0.7, 0.2))
    assert label_by_rate(scores[0], 0.4).tolist() == [0] * 10  # constant: the majority
    assert label_by_rate(scores[1], 0.4).tolist() == (parts == 0).astype(int).tolist()
    rng = np.random.default_rng(0)
    s, labels = rng.integers(0, 5, 200).astype(float), rng.integers(0, 2, 200).astype(float)
    assert auc(s, labels) == pytest.approx(roc_auc_score(labels, s), abs=1e-12)


@pytest.mark.parametrize(("change", "said"), [
    ({"y": np.zeros(569)}, "'y'"),
    ({"known_fraction": 0.0}, "'known_fraction'"),
    ({"known_fraction": 0.6}, "'known_fraction'"),
    ({"top_levels": 4}, "'top_levels'"),
    ({"passive_x": np.zeros((10, 2))}, "same rows"),
])
def test_bad_settings_name_the_parameter(change: dict[str, Any], said: str) -> None:
    data = audit_data("breast_cancer")
    args: dict[str, Any] = {"passive_x": data.passive, "active_x": data.active, "y": data.y,
                            "n_estimators": 1, **change}
    with pytest.raises(ValidationError, match=said):
        audit_secureboost(**args)


def test_the_cli_prints_the_table_and_writes_json(tmp_path: Path) -> None:
    from islands.cli import app

    out = tmp_path / "sb.json"
    result = CliRunner().invoke(app, ["audit", "secureboost", "--trees", "3", "--depth", "2",
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "first tree" in result.output and "test AUC" in result.output
    saved = json.loads(out.read_text())
    assert saved["dataset"] == "breast_cancer" and len(saved["settings"]) == 5
    assert saved["settings"][4]["mix"] is True and "mix" in result.output
    faithful, hardened = saved["settings"][0], saved["settings"][1]
    assert faithful["curve"][0]["accuracy"] > saved["prior_accuracy"] + 0.2
    assert hardened["curve"][0]["accuracy"] == saved["prior_accuracy"]


@pytest.mark.parametrize(("args", "named"), [
    (["--dataset", "mnist"], "--dataset"),
    (["--known", "0.9"], "--known"),
    (["--known", "0"], "--known"),
    (["--top-levels", "4", "--depth", "3"], "--top-levels"),
])
def test_the_cli_names_a_bad_option(args: list[str], named: str) -> None:
    from islands.cli import app

    result = CliRunner().invoke(app, ["audit", "secureboost", *args])
    assert result.exit_code == 2
    assert named in result.output
