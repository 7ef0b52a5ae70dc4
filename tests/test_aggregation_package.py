"""islands.aggregation is a package of its own: what moved out of islands.hfl still works.

Aggregators and protections left ``islands/hfl/`` for ``islands/aggregation/`` and the
torch training for ``islands/hfl/torch/`` (issue 23). Parties of different versions
exchange these messages by wire name, so the names stay those of islands.hfl.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

import islands.hfl
from islands.aggregation import AggReply, AggStep, MeanAggregator
from islands.aggregation.additive import Share
from islands.hfl.torch import ModelSpec
from islands.runtime import wire


def test_moved_messages_keep_their_wire_names() -> None:
    registry = wire.registered_messages()
    assert registry["hfl.AggStep"] is AggStep
    assert registry["hfl.AggReply"] is AggReply
    assert registry["hfl.AdditiveShare"] is Share
    assert not [name for name in registry if name.startswith("islands.aggregation")]


def test_a_step_encoded_under_the_old_layout_decodes() -> None:
    # bytes as a party of the previous layout (islands.hfl.aggregate) sent them: the codec
    # writes the wire name, never the module, so they decode to the moved class
    step = AggStep(round=3, phase="ss-sum", body={"x": np.arange(3.0)})
    raw = wire.encode(step)
    assert b"hfl.AggStep" in raw and b"islands.hfl" not in raw
    back = wire.decode(raw)
    assert isinstance(back, AggStep) and back.phase == "ss-sum" and back.round == 3
    np.testing.assert_array_equal(back.body["x"], np.arange(3.0))


def test_importing_aggregation_or_hfl_loads_no_torch_and_no_protocol() -> None:
    code = (
        "import json, sys\n"
        "import islands.aggregation\n"
        "after_aggregation = sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['islands', p] for p in ('hfl', 'cca', 'pca', 'vfl', 'psi', 'securesum')))\n"
        "import islands.hfl\n"
        "from islands.hfl import APFL, FedAvg, FederatedModel, MeanAggregator\n"
        "print(json.dumps({'protocols': after_aggregation, 'torch': 'torch' in sys.modules,"
        " 'mean': MeanAggregator.__module__}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    seen = json.loads(out.stdout)
    assert seen == {"protocols": [], "torch": False, "mean": "islands.aggregation.base"}
    assert MeanAggregator.__module__ == "islands.aggregation.base"


def test_model_spec_still_comes_from_islands_hfl() -> None:
    assert islands.hfl.ModelSpec is ModelSpec
    assert ModelSpec.__module__ == "islands.hfl.torch.models"


def test_peak_abs_reads_nan_inf_and_the_largest_magnitude() -> None:
    import math

    import numpy as np

    from islands.arrays import peak_abs

    f32 = np.float32
    assert peak_abs(np.array([1, -3, 2], f32)) == 3.0
    assert peak_abs(np.array([], f32)) == 0.0
    assert peak_abs(np.array([-np.inf, 0], f32)) == math.inf
    assert math.isnan(peak_abs(np.array([1, np.nan, -np.inf], f32)))
    assert math.isnan(peak_abs(np.array([np.nan], np.float64)))
