"""A decode room whose prefill never shows up, on the smallest decode rank that can open
one: the tests of a room's bootstrap timeout (which setting wins, what gets logged) need
nothing more."""
import contextlib

import numpy as np

import pdkv
from pdkv.testing import kv_args_from_buffers


def decode_args(buf):
    """KVArgs of one MLA buffer of 64-byte pages (16 pages in 64 * 16 bytes of uint8)."""
    return kv_args_from_buffers([buf], item_lens=[64], page_size=1, layer_buffers=[[0]],
                                kv_head_num=1, total_kv_head_num=1, head_dim=32,
                                dtype_bytes=2, is_mla=True)


@contextlib.contextmanager
def room_without_prefill(room: int, bootstrap_timeout_s: float):
    """An initialised decode KVReceiver of `room` under a real bootstrap server where no
    prefill ever registers, on a manager configured with `bootstrap_timeout_s`."""
    buf = np.zeros(64 * 16, np.uint8)
    with pdkv.BootstrapServer("127.0.0.1", 0) as server:
        addr = f"127.0.0.1:{server.port}"
        with pdkv.KVManager(decode_args(buf), "decode", addr,
                            config=pdkv.Config(bootstrap_timeout_s=bootstrap_timeout_s)) as mgr:
            receiver = pdkv.KVReceiver(mgr, addr, room)
            receiver.init()
            yield receiver
