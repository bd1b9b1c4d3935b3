"""pdkv under sglang's own call sequences (prefill.py, decode.py) with the backend chosen
as ``--disaggregation-transfer-backend pdkv`` through sglang's plugin loading, across real
processes and sockets: a prefill of two DP groups whose load balancer does not follow the
room, a decode whose KVArgs carry no head counts, and a retracted request handed back."""
import json
import os

import pytest

torch = pytest.importorskip("torch")
import pdkv  # noqa: E402
from engine_replay import Ranks  # noqa: E402
from sglang_plugin_site import make_plugin_site  # noqa: E402
from sglang_upstream_replay import decode_main, prefill_main  # noqa: E402

SUCCESS, FAILED = int(pdkv.KVPoll.Success), int(pdkv.KVPoll.Failed)
HEADS = 4
# room -> the prefill DP group the balancer chose: never room % 2, so a decode that
# followed the room would ask the wrong group.
PLACEMENT = {101: 0, 202: 1, 303: 0}


@pytest.fixture
def site(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_attention_heads": 16,
                                                   "num_key_value_heads": HEADS}))
    return make_plugin_site(str(tmp_path / "site")), str(model)


def test_decode_and_prefill_run_as_sglang_calls_them(site):
    plugin_site, model_dir = site
    requests = [(101, 21, 1), (202, 8, 2), (303, 9, 3)]
    base = dict(heads=HEADS, page_size=4, requests=requests, placement=PLACEMENT,
                plugin_site=plugin_site, model_dir=model_dir)
    with Ranks() as ranks:
        for r in range(2):
            ranks.start(f"p{r}", prefill_main, dict(base, rank=r, dp=2, hold=[303]))
        ranks.start("d0", decode_main, dict(base, rebootstrap=[303]))
        ranks.serve_bootstrap()
        ranks.expect("ready", 3)
        done = {m[1]: m[2] for m in ranks.expect("done", 3)}
    got = done["d0"]["outcome"]
    for room in (101, 202):
        o = got[room]
        assert o["state"] == SUCCESS, (room, o["reason"])
        # the DP group came from the prefill's report, not from room % dp_size
        assert o["dp_rank"] == PLACEMENT[room]
        assert o["bytes_ok"] and o["meta_ok"], room
        assert o["conclude_state"] == SUCCESS
        assert done[f"p{PLACEMENT[room]}"]["outcome"][room] == SUCCESS
    # the retracted request ends through sglang's failure path, saying why
    assert got[303]["state"] == FAILED
    assert got[303]["conclude_state"] == FAILED
    assert "retract" in got[303]["reason"], got[303]["reason"]


def test_launch_server_accepts_pdkv_in_the_launcher_and_its_schedulers(site):
    from engine_replay import STANDINS
    from test_engine_adapters_unit import _run_python
    plugin_site, _ = site
    paths = os.pathsep.join([STANDINS, plugin_site, os.environ["PYTHONPATH"]])
    out = _run_python(["-m", "sglang.launch_server", "--disaggregation-transfer-backend",
                       "pdkv"], {"PYTHONPATH": paths})
    assert out.strip() == "main=PdkvKVManager scheduler=PdkvKVManager", out


def test_dp_attention_rooms_land_in_both_groups_with_attention_tp_2(site):
    # tp 4 = 2 DP groups x attention TP 2 on the prefill, a decode of TP 2: each room's
    # group is the balancer's (reported by the group's first rank), never room % 2, and
    # every decode rank receives its half of the heads from the group that served it.
    plugin_site, model_dir = site
    placement = {11: 1, 12: 0, 13: 1, 14: 0, 15: 0, 16: 1}
    requests = [(room, 5 + 3 * k, 40 + k) for k, room in enumerate(placement)]
    base = dict(heads=HEADS, page_size=4, requests=requests, placement=placement,
                plugin_site=plugin_site, model_dir=model_dir)
    with Ranks() as ranks:
        for r in range(4):
            ranks.start(f"p{r}", prefill_main, dict(base, rank=r, dp=2, attn_tp=2))
        for r in range(2):
            ranks.start(f"d{r}", decode_main, dict(base, tp=2, rank=r))
        ranks.serve_bootstrap()
        ranks.expect("ready", 6)
        done = {m[1]: m[2] for m in ranks.expect("done", 6)}
    assert {placement[room] for room in placement} == {0, 1}
    for d in ("d0", "d1"):
        for room, group in placement.items():
            o = done[d]["outcome"][room]
            assert o["state"] == SUCCESS, (d, room, o["reason"])
            assert o["dp_rank"] == group, (d, room, o["dp_rank"])
            assert o["bytes_ok"] and o["meta_ok"], (d, room)
    for r in range(4):
        served = done[f"p{r}"]["outcome"]
        assert set(served) == {room for room, g in placement.items() if g == r // 2}
        assert all(state == SUCCESS for state in served.values()), (r, served)
