"""MLA L1.5 partial page ownership (docs/API.md) through the KV API: all four
ON/OFF combinations across real processes with prefill TP != decode TP, every owned byte
checked at its destination and every page nobody should write checked untouched, plus
the ValueError cases of KVSender.send / KVReceiver.send_metadata."""
import numpy as np
import pytest

import pdkv
from kv_harness import RankMemory, Shape
from l15_harness import L15Cluster
from test_kv_e2e import assert_all_succeeded

MLA = Shape(mla=True, heads=1, head_dim=16)


@pytest.mark.parametrize("l15_prefill,l15_decode,p_tp,d_tp", [
    (False, False, 2, 1), (False, False, 1, 3),
    (True, False, 2, 1), (True, False, 2, 3),
    (False, True, 1, 2), (False, True, 3, 2),
    (True, True, 2, 3), (True, True, 3, 2),
])
def test_all_four_modes_deliver_the_owned_pages(l15_prefill, l15_decode, p_tp, d_tp):
    with L15Cluster(pdkv, MLA, p_tp, d_tp, l15_prefill, l15_decode, rooms=(301, 302),
                    pages=7, chunks=2) as c:
        done = c.start().run()
        assert_all_succeeded(done)
        if l15_decode:  # every decode rank owned part of the pages, not none or all
            for d in range(d_tp):
                assert 0 < done[("decode", d)]["owned"][301] < 7


@pytest.mark.parametrize("l15_prefill,l15_decode,p_tp,d_tp", [
    (True, False, 2, 1), (False, True, 1, 2), (True, True, 2, 2),
])
def test_decode_prefix_skips_the_prefix_pages_ownership_too(l15_prefill, l15_decode, p_tp, d_tp):
    # The prefill's chunk masks cover the prefix pages as well; they must be dropped with
    # those pages, or every later page would come from its neighbour's local page.
    with L15Cluster(pdkv, MLA, p_tp, d_tp, l15_prefill, l15_decode, rooms=(311, 312),
                    pages=8, chunks=3, prefix_pages=3) as c:
        assert_all_succeeded(c.start().run())


def test_a_refused_chunk_leaves_the_room_intact():
    with L15Cluster(pdkv, MLA, 2, 1, True, False, rooms=(321,), pages=6, chunks=2,
                    bad_first=True) as c:
        done = c.start().run()
        assert_all_succeeded(done)
        assert sum(done[("prefill", r)]["rejected"] for r in range(2)) > 0


# ---- ValueError cases (in one process: each is refused before anything is sent) ----------

@pytest.fixture(scope="module")
def server():
    with pdkv.BootstrapServer("127.0.0.1", 0) as s:
        yield f"127.0.0.1:{s.port}"


def _manager(addr, mode, l15, mla=True):
    mem = RankMemory(Shape(mla=mla, heads=1 if mla else 4, head_dim=16, capacity=16), 1, 0)
    args = mem.kv_args(pdkv, 0, 1, 1)
    args.enable_mla_l1_5_cache = l15
    mgr = pdkv.KVManager(args, mode, addr)
    mgr._memory = mem  # keeps the registered buffers alive with the manager
    return mgr


@pytest.fixture(scope="module")
def managers(server):
    mgrs = {(mode, l15): _manager(server, mode, l15)
            for mode in ("prefill", "decode") for l15 in (False, True)}
    yield mgrs
    for m in mgrs.values():
        m.shutdown()


_room = iter(range(5000, 6000))


def _sender(managers, l15):
    s = pdkv.KVSender(managers[("prefill", l15)], "", next(_room))
    s.init(4)
    return s


def _receiver(managers, l15):
    return pdkv.KVReceiver(managers[("decode", l15)], "127.0.0.1:1", next(_room))


def test_kvargs_l1_5_defaults_off_and_is_a_known_field():
    assert pdkv.KVArgs().enable_mla_l1_5_cache is False
    assert pdkv.KVArgs(enable_mla_l1_5_cache=True).enable_mla_l1_5_cache is True
    assert pdkv.KVArgs(enable_mla_l1_5_cache=True).to_dict()["enable_mla_l1_5_cache"] is True


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_l1_5_needs_an_mla_model(server, mode):
    with pytest.raises(ValueError, match="is_mla"):
        _manager(server, mode, True, mla=False)


@pytest.mark.parametrize("ownership", [
    dict(page_transfer_mask=[True, False], page_local_indices=[3]),
    dict(page_transfer_mask=[True, False]),
    dict(page_local_indices=[3]),
])
def test_prefill_without_l1_5_refuses_ownership(managers, ownership):
    with pytest.raises(ValueError):
        _sender(managers, False).send([1, 2], **ownership)


@pytest.mark.parametrize("ownership,words", [
    ({}, "page_transfer_mask"),
    (dict(page_transfer_mask=[True, True]), "both"),
    (dict(page_local_indices=[3, 4]), "both"),
    (dict(page_transfer_mask=[True], page_local_indices=[3]), "one entry per page"),
    (dict(page_transfer_mask=[True, True, False], page_local_indices=[3, 4]),
     "one entry per page"),
    (dict(page_transfer_mask=[True, True], page_local_indices=[3]), "one local page"),
    (dict(page_transfer_mask=[True, False], page_local_indices=[3, 4]), "one local page"),
    (dict(page_transfer_mask=[True, False], page_local_indices=[16]), "outside"),
    (dict(page_transfer_mask=[True, False], page_local_indices=[-1]), "outside"),
    (dict(page_transfer_mask=[0.5, 1.0], page_local_indices=[3]), "boolean"),
    (dict(page_transfer_mask=[[True, False]], page_local_indices=[3]), "one-dimensional"),
    (dict(page_transfer_mask=[True, False], page_local_indices=[3.5]), "integers"),
])
def test_prefill_l1_5_refuses_bad_chunk_ownership(managers, ownership, words):
    with pytest.raises(ValueError, match=words):
        _sender(managers, True).send(np.array([1, 2], np.int32), **ownership)


def test_prefill_l1_5_accepts_good_ownership_in_every_form(managers):
    s = _sender(managers, True)
    s.send(np.array([1], np.int32), page_transfer_mask=np.array([True]),
           page_local_indices=np.array([5], np.int32))
    s.send([2], page_transfer_mask=[False], page_local_indices=[])
    with pytest.raises(ValueError, match="overruns"):  # good ownership, too many pages
        s.send([3, 4, 5], page_transfer_mask=[True, False, True], page_local_indices=[7, 8])
    s.send(np.array([3, 4], np.int64), page_transfer_mask=np.array([1, 0], np.int8),
           page_local_indices=np.array([7], np.int64))


def test_prefill_l1_5_empty_chunk_needs_no_ownership(managers):
    s = _sender(managers, True)
    s.send([])
    s.send(np.array([], np.int32), page_transfer_mask=[], page_local_indices=[])


GOOD_DST = dict(page_transfer_mask=[True, False, True],
                page_indices_mapping=[0, 0, 1], page_local_indices=[9, 10])


@pytest.mark.parametrize("drop", ["page_transfer_mask", "page_indices_mapping",
                                  "page_local_indices"])
def test_decode_without_l1_5_refuses_ownership(managers, drop):
    given = {k: v for k, v in GOOD_DST.items() if k != drop}
    with pytest.raises(ValueError):
        _receiver(managers, False).send_metadata([1, 2, 3], **given)
    with pytest.raises(ValueError):
        _receiver(managers, False).send_metadata([1, 2, 3], **GOOD_DST)


@pytest.mark.parametrize("change,words", [
    (dict(page_transfer_mask=None, page_indices_mapping=None, page_local_indices=None),
     "page_transfer_mask"),
    (dict(page_indices_mapping=None), "all three"),
    (dict(page_local_indices=None), "all three"),
    (dict(page_transfer_mask=[True, False]), "one entry per destination page"),
    (dict(page_transfer_mask=[True, False, True, True]), "one entry per destination page"),
    (dict(page_indices_mapping=[0, 1]), "one entry per destination page"),
    (dict(page_local_indices=[9]), "one local page"),
    (dict(page_local_indices=[9, 10, 11]), "one local page"),
    (dict(page_indices_mapping=[0, 0, 2]), "outside page_local_indices"),
    (dict(page_indices_mapping=[-1, 0, 1]), "outside page_local_indices"),
    (dict(page_indices_mapping=[1, 0, 1]), "two owned pages"),
    (dict(page_local_indices=[9, 16]), "outside this rank"),
    (dict(page_local_indices=[-2, 10]), "outside this rank"),
    (dict(page_transfer_mask=["a", "b", "c"]), "boolean"),
])
def test_decode_l1_5_refuses_bad_request_ownership(managers, change, words):
    given = {k: v for k, v in dict(GOOD_DST, **change).items() if v is not None}
    with pytest.raises(ValueError, match=words):
        _receiver(managers, True).send_metadata(np.array([1, 2, 3], np.int32), **given)


def test_decode_l1_5_accepts_good_ownership_in_every_form(managers):
    _receiver(managers, True).send_metadata([1, 2, 3], **GOOD_DST)
    _receiver(managers, True).send_metadata(
        np.array([1, 2, 3], np.int64), page_transfer_mask=np.array([1, 1, 0], np.uint8),
        page_indices_mapping=np.array([1, 0, -7], np.int32),  # reversed; unowned ignored
        page_local_indices=np.array([4, 5], np.int32))
    _receiver(managers, True).send_metadata([], page_transfer_mask=[], page_indices_mapping=[],
                                            page_local_indices=[])
