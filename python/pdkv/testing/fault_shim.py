"""The chaos suite's LD_PRELOAD fault shim (robustness/chaos/fault_shim.c, PDKV_FAULT_* in
docs/CONFIG.md) aimed at one point of the TCP engine's protocol: the ACK frames a
receiving rank sends. Breaking or stalling exactly those, in every run, is how tests put
a batch's acknowledgement in doubt or keep batches in flight longer."""
from __future__ import annotations

import os

# The TCP engine's ACK frame header starts: magic "PDKV", version 4, type ACK (4), flags 0
# (engine/backends/tcp/tcp_frame.h).
ACK_FRAME_PREFIX = "50444b5604040000"


def shim_path() -> str:
    """The shim the package build puts beside the chaos driver (pdkv/_tools/robustness/chaos)."""
    import pdkv
    path = os.path.join(os.path.dirname(pdkv.__file__), "_tools", "robustness", "chaos",
                        "libpdkv_fault_shim.so")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: the README build makes it (robustness/chaos)")
    return path


def on_ack_frames(**fault) -> dict:
    """Environment of a process whose every ACK frame send the shim acts on; `fault` adds
    the rest as PDKV_FAULT_<NAME> (mode="stall", stall_ms=10; max=1 for one fault only)."""
    env = {"LD_PRELOAD": shim_path(), "PDKV_FAULT_EVERY_N": "1",
           "PDKV_FAULT_CALLS": "send,sendmsg,write", "PDKV_FAULT_PREFIX": ACK_FRAME_PREFIX}
    env.update({f"PDKV_FAULT_{name.upper()}": str(v) for name, v in fault.items()})
    return env
