"""Every failure a room can meet is reported with its typed cause and stage
(KVTransferError.cause / .stage) on each side, across real processes: bootstrap server,
prefill and decode ranks over loopback (kv_harness.Cluster)."""
import time

import pytest

import pdkv
from kv_harness import Cluster, Shape

FAILED, SUCCESS = int(pdkv.KVPoll.Failed), int(pdkv.KVPoll.Success)
Cause, Stage = pdkv.FailureCause, pdkv.FailureStage


def failure(done, role, room, rank=0):
    """(cause, stage) a side reported for `room`, after checking it failed."""
    report = done[(role, rank)]
    assert report["states"][room] == FAILED, (role, report["states"])
    cause, stage = report["causes"][room]
    assert isinstance(cause, pdkv.FailureCause), cause
    assert isinstance(stage, pdkv.FailureStage), stage
    return cause, stage


def counted(done, role, cause, rank=0):
    """The failure is counted under the cause's label (the metric label)."""
    by_cause = done[(role, rank)]["metrics"]["failures_by_cause"]
    assert by_cause.get(cause.label, 0) >= 1, by_cause


# --- without processes ------------------------------------------------------------

def test_python_enums_mirror_the_native_labels():
    from pdkv import _native
    assert [c.label for c in Cause] == _native.failure_cause_labels()
    assert [s.value for s in Stage] == _native.failure_stage_labels()


def test_kv_transfer_error_keeps_its_constructor_and_message():
    e = pdkv.KVTransferError(3, "boom")
    assert str(e) == "KV transfer of room 3 failed: boom"
    assert e.room == 3 and e.reason == "boom"
    assert e.cause is Cause.Internal and e.stage is None
    e = pdkv.KVTransferError(3, "boom", Cause.PeerDead, "transfer")
    assert e.cause is Cause.PeerDead and e.stage is Stage.Transfer and e.stage == "transfer"
    assert "FailureCause" in pdkv.__all__ and pdkv.FailureCause is Cause


# --- timeouts -----------------------------------------------------------------------

def test_bootstrap_timeout():
    env = {"PDKV_BOOTSTRAP_TIMEOUT_S": "1.0"}
    with Cluster(pdkv, Shape(), p_tp=0, rooms=(300,), env=env, timeout=10) as c:
        done = c.start().run(timeout=20)
        assert failure(done, "decode", 300) == (Cause.BootstrapTimeout, Stage.Bootstrap)
        assert "bootstrap timeout" in done[("decode", 0)]["reasons"][300]
        counted(done, "decode", Cause.BootstrapTimeout)


def test_waiting_timeout_of_a_transfer_that_never_ends():
    # Layerwise, and no forward marks layers: bootstrapped, never done.
    env = {"PDKV_WAITING_TIMEOUT_S": "1.0"}
    with Cluster(pdkv, Shape(), rooms=(301,), layerwise_interval=1, env=env, timeout=10) as c:
        done = c.start().run(timeout=30)
        assert failure(done, "prefill", 301) == (Cause.WaitingTimeout, Stage.Transfer)
        cause, stage = failure(done, "decode", 301)
        # Its own deadline, or the prefill's (told with its cause): the same cause.
        assert cause is Cause.WaitingTimeout
        assert stage in (Stage.Waiting, Stage.Transfer)
        counted(done, "prefill", Cause.WaitingTimeout)


def test_metadata_timeout_when_the_first_token_never_comes():
    env = {"PDKV_METADATA_TIMEOUT_S": "0.5"}
    with Cluster(pdkv, Shape(), rooms=(302,), wait_for_metadata=True, env=env,
                 timeout=10) as c:
        done = c.start().run(timeout=30)
        assert failure(done, "prefill", 302) == (Cause.MetadataTimeout, Stage.Completion)
        assert failure(done, "decode", 302) == (Cause.MetadataTimeout, Stage.Completion)


# --- aborts -------------------------------------------------------------------------

def test_decode_abort_is_local_there_and_by_peer_on_the_prefill():
    with Cluster(pdkv, Shape(), rooms=(310,), abort="decode_before_transfer", timeout=15) as c:
        done = c.start().run()
        assert failure(done, "decode", 310)[0] is Cause.AbortedLocally
        assert failure(done, "prefill", 310)[0] is Cause.AbortedByPeer
        counted(done, "decode", Cause.AbortedLocally)
        counted(done, "prefill", Cause.AbortedByPeer)


def test_prefill_abort_is_local_there_and_by_peer_on_the_decode():
    with Cluster(pdkv, Shape(), rooms=(311,), abort="prefill_after_send", layerwise_interval=1,
                 forward_ms=200, timeout=15) as c:
        done = c.start().run()
        cause, stage = failure(done, "prefill", 311)
        assert cause is Cause.AbortedLocally
        # Wherever the abort caught the room (its pre-allocation may still be on the way),
        # the decode reports the prefill's stage, not its own.
        assert failure(done, "decode", 311) == (Cause.AbortedByPeer, stage)


# --- peers dying --------------------------------------------------------------------

def test_kill_9_of_the_prefill_is_peer_dead_on_the_decode():
    with Cluster(pdkv, Shape(), rooms=(320,), timeout=20) as c:
        c.start()
        time.sleep(1.0)  # registered and pre-allocated; the prefill waits for go
        c.kill("prefill", 0)
        done = c.run(timeout=30, expect=[("decode", 0)])
        assert failure(done, "decode", 320)[0] is Cause.PeerDead
        counted(done, "decode", Cause.PeerDead)


def test_kill_9_of_a_decode_is_peer_dead_or_a_lost_link_on_the_prefill():
    with Cluster(pdkv, Shape(), d_dp=2, rooms=(330, 331), timeout=15) as c:
        c.start()
        time.sleep(1.0)
        c.kill("decode", 1)  # DP group 1 holds room 331
        done = c.run(timeout=30, expect=[("prefill", 0), ("decode", 0)])
        # Liveness (its connection closed) or the transfer engine (its retries spent),
        # whichever notices first.
        assert failure(done, "prefill", 331)[0] in (Cause.PeerDead, Cause.LinkLost)
        assert done[("prefill", 0)]["states"][330] == SUCCESS


# --- mismatches and bad destinations ------------------------------------------------

def test_layer_order_mismatch_is_refused_registration_on_both_sides():
    with Cluster(pdkv, Shape(), rooms=(340,), decode_layout="swapped", timeout=15) as c:
        done = c.start().run(timeout=30)
        assert failure(done, "decode", 340) == (Cause.LayoutMismatch, Stage.Bootstrap)
        assert failure(done, "prefill", 340) == (Cause.LayoutMismatch, Stage.Bootstrap)
        assert "layout mismatch" in done[("decode", 0)]["reasons"][340]
        counted(done, "decode", Cause.LayoutMismatch)


def test_page_layout_mismatch_fails_the_decode_when_it_resolves_the_route():
    # The decode sees it in the bootstrap record and never contacts the prefill, whose
    # room then times out waiting for its pre-allocation.
    env = {"PDKV_BOOTSTRAP_TIMEOUT_S": "2.0"}
    with Cluster(pdkv, Shape(), rooms=(341,), decode_layout="HND", env=env, timeout=15) as c:
        done = c.start().run(timeout=30)
        assert failure(done, "decode", 341) == (Cause.LayoutMismatch, Stage.Bootstrap)
        assert failure(done, "prefill", 341) == (Cause.BootstrapTimeout, Stage.Bootstrap)


def test_destination_outside_the_decode_buffers_is_out_of_range():
    with Cluster(pdkv, Shape(), rooms=(350,), bad_dst_page=True, timeout=15) as c:
        done = c.start().run(timeout=30)
        assert failure(done, "decode", 350)[0] is Cause.OutOfRange
        assert failure(done, "prefill", 350)[0] is Cause.OutOfRange


def test_checksum_the_prefill_did_not_send_is_a_checksum_mismatch_on_the_decode():
    # Only the decode checks: it fails closed on a status without a checksum, after every
    # byte landed. The status rides the room's last batch, so the decode fails the room
    # (and aborts it on the prefill) while that batch's acknowledgement is still on its
    # way back: the prefill ends Success, or Failed by the decode's abort when the abort
    # wins that race (seen under CI load), with the decode's cause, which the abort
    # carries. Never any other way.
    with Cluster(pdkv, Shape(), rooms=(360,), decode_env={"PDKV_VERIFY_CHECKSUM": "1"},
                 timeout=15) as c:
        done = c.start().run(timeout=30)
        assert failure(done, "decode", 360) == (Cause.ChecksumMismatch, Stage.Completion)
        if done[("prefill", 0)]["states"][360] != SUCCESS:
            assert failure(done, "prefill", 360)[0] is Cause.ChecksumMismatch
        counted(done, "decode", Cause.ChecksumMismatch)
