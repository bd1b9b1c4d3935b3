"""Stand-in for sglang.srt.server_args.ServerArgs: the fields the adapter reads."""
import dataclasses
from typing import Optional


@dataclasses.dataclass
class ServerArgs:
    host: str = "127.0.0.1"
    port: int = 30000
    disaggregation_mode: str = "null"
    disaggregation_transfer_backend: str = "mooncake"  # upstream default
    disaggregation_bootstrap_port: int = 8998
    tp_size: int = 1
    dp_size: int = 1
    pp_size: int = 1
    enable_dp_attention: bool = False
    dist_init_addr: Optional[str] = None
