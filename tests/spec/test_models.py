"""Every small model of spec/models.json, checked by TLC, must behave as the manifest records."""

import pytest

from harness import check_models
from harness.tlc.runner import run_tlc

SMALL = [m for m in check_models.load_manifest() if m["size"] == "small"]


@pytest.mark.tlc
@pytest.mark.parametrize("model", SMALL, ids=[m["name"] for m in SMALL])
def test_small_model_behaves_as_recorded(model):
    res = run_tlc(check_models.SPEC_DIR / model["spec"], check_models.SPEC_DIR / model["config"],
                  check_deadlock=model.get("check_deadlock", True), timeout_s=model["budget_s"] * 3)
    assert check_models.judge(model, res) == [], res.summary()
