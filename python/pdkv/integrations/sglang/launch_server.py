"""``python -m pdkv.integrations.sglang.launch_server <sglang launch_server arguments>``

sglang's own launcher with pdkv installed for ``--disaggregation-transfer-backend
nixl`` (or the name in ``PDKV_SGLANG_TAKEOVER``). ``install`` runs when this module
is imported, and this module stays ``__main__`` while sglang's launcher runs (its code
is executed without replacing ``sys.modules["__main__"]``), so the scheduler processes
sglang spawns, which re-import ``__main__``, install it too.
"""
import runpy

from pdkv.integrations.sglang.install import install

install()

if __name__ == "__main__":
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=False)
