"""Stand-in for sglang.srt.model_executor.model_runner: only the start-up step that
branches on the transfer backend *name* (upstream ModelRunner.__init__ calls
init_shared_mooncake_transfer_engine, which builds Mooncake's TransferEngine, importing
``mooncake``, for any prefill/decode instance whose backend is "mooncake"; see
upstream_signatures.json). Mooncake is absent here, so that step raises ImportError, as
it does on a host without Mooncake."""


class ModelRunner:
    def __init__(self, server_args):
        self.server_args = server_args
        self.init_shared_mooncake_transfer_engine()

    def init_shared_mooncake_transfer_engine(self):
        if (self.server_args.disaggregation_mode != "null"
                and self.server_args.disaggregation_transfer_backend == "mooncake"):
            import mooncake.engine  # noqa: F401 - what upstream's TransferEngine needs
