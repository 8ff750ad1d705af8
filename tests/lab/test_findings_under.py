"""lab/findings_under.py (issue 36): the failing models of the core spec checked again under 18.16's
leader rule and under insert_quorum = RF. Its record covers every failing model under both, the
table in spec/FINDINGS.md is the record's rendering, and two cheap models show that a run tells
a finding quorum closes from one it leaves."""

import json

import pytest

from lab import findings_under


def _record():
    return json.loads(findings_under.RECORD.read_text())


def test_the_record_has_every_failing_model_under_each_setting():
    rows = _record()
    models = {m["name"] for m in findings_under.failing_models()}
    for under in findings_under.UNDER:
        assert {r["model"] for r in rows if r["under"] == under} == models, under


def test_the_findings_table_is_the_records_rendering():
    text = findings_under.FINDINGS.read_text()
    shown = text.split(findings_under.BEGIN)[1].split(findings_under.END)[0].strip()
    assert shown == findings_under.table(_record()).strip()


def test_a_model_that_sets_a_definition_itself_is_left_out():
    names = {m["name"] for m in findings_under.failing_models()}
    assert "MCLivenessMutationOffLeader_v18_16" not in names            # BaseProtocol <- V18_16
    assert "MCLostReplicaQuorum_clone_lost_replica_from_one_peer" not in names   # InsertQuorum <- QuorumOfRF
    assert "MCLostReplica_clone_lost_replica_from_one_peer" in names


@pytest.mark.tlc
def test_quorum_closes_the_unreplicated_insert_bound_and_leaves_the_dedup_window_bound():
    by = {m["name"]: m for m in findings_under.failing_models()}
    closed = findings_under.judge(by["MCRepairUnreplicatedInsert"], "quorum", timeout_s=300)
    left = findings_under.judge(by["MCRetryBeyondDedupWindow"], "quorum", timeout_s=300)
    assert closed["verdict"] == "closed" and closed["distinct_states"] > 0, closed
    assert left["verdict"] == "still shows", left
    assert not list(findings_under.check_models.SPEC_DIR.glob("rfc/_under_*.cfg")), "a temporary cfg was left"
