"""Every small model of spec/models.json, checked by TLC, must behave as the manifest records."""

import pytest

from harness import check_models

SMALL = [m for m in check_models.load_manifest() if m["size"] == "small"]
# A small model TLC took longer than this on record is `long`: `make test` leaves it to `make
# check`, whose check-spec stage runs every model of the manifest anyway. What stays in `make
# test` is most of the broken variants (the teeth) and the faster holding models.
MAKE_TEST_SECONDS = 15


def param(model):
    slow = model.get("recorded_seconds", 0) > MAKE_TEST_SECONDS
    return pytest.param(model, id=model["name"], marks=[pytest.mark.long] if slow else [])


@pytest.mark.tlc
@pytest.mark.parametrize("model", [param(m) for m in SMALL])
def test_small_model_behaves_as_recorded(model):
    res = check_models.run_model(model)
    assert check_models.judge(model, res) == [], res.summary()


def test_generated_cfgs_match_their_table():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(check_models.SPEC_DIR / "gen_cfgs.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_cfg_is_in_the_manifest():
    listed = {m["config"] for m in check_models.load_manifest()}
    on_disk = {p.name for p in check_models.SPEC_DIR.glob("MC*.cfg")}
    assert on_disk - listed == set(), "cfg files no model in spec/models.json runs"
