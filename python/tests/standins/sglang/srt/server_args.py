"""Stand-in for sglang.srt.server_args: ServerArgs (the fields the adapter and the replays
read) and the backend choices plugins extend."""
import dataclasses
from typing import Optional

DISAGG_TRANSFER_BACKEND_CHOICES = ["mooncake", "nixl", "ascend", "fake", "mori"]


def add_disagg_transfer_backend_choices(choices):
    DISAGG_TRANSFER_BACKEND_CHOICES.extend(choices)


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
    model_path: str = ""
    revision: Optional[str] = None
    load_balance_method: str = "auto"
    kv_cache_dtype: str = "auto"

    def __post_init__(self):
        # As upstream's argparse choices refuse it: a backend name sglang does not know.
        if self.disaggregation_transfer_backend not in DISAGG_TRANSFER_BACKEND_CHOICES:
            raise ValueError("invalid choice for --disaggregation-transfer-backend: "
                             f"{self.disaggregation_transfer_backend!r}")
