"""Stand-in for sglang/srt/disaggregation/common/conn.py: only
CommonKVReceiver.query_prefill_dp_ranks, which sglang's decode scheduler calls on this
class (not on the backend's receiver): POST {"bootstrap_rooms": [...]} to the prefill's
bootstrap server's /query_dp_ranks, {} on any error."""
import json
import urllib.request
from typing import Dict, List


class CommonKVReceiver:
    @staticmethod
    def query_prefill_dp_ranks(bootstrap_addr: str, bootstrap_rooms: List[int]) -> Dict[str, int]:
        req = urllib.request.Request(f"http://{bootstrap_addr}/query_dp_ranks", method="POST",
                                     data=json.dumps({"bootstrap_rooms": bootstrap_rooms}).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as res:
                return json.loads(res.read()) if res.status == 200 else {}
        except Exception:  # noqa: BLE001 - upstream logs and answers {}
            return {}
