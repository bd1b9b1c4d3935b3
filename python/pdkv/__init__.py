"""pdkv: KV-cache transfer for prefill/decode disaggregated LLM serving.

Sub-modules are imported on demand (``import pdkv.plan``), so importing the package never
fails because one native module is missing. The engine-facing API (``pdkv.KVManager``,
``pdkv.KVSender``, ``pdkv.KVReceiver``, ``pdkv.KVPoll``, ``pdkv.KVArgs``,
``pdkv.BootstrapServer``, ``pdkv.KVTransferError``) lives in ``pdkv.kv`` and is loaded on
first use of one of those names; ``pdkv.FailureCause`` / ``pdkv.FailureStage`` (why and
where a room failed) live in ``pdkv.failure``, ``pdkv.Config`` (settings in code) in
``pdkv.config``. ``pdkv.metrics`` (Prometheus) and ``pdkv.log`` (the logging bridge) are
sub-modules. ``pdkv.__version__`` and ``pdkv.PROTOCOL_VERSION`` (the control-plane wire
protocol) come from the build's one version source (CMake's project version, see
cmake/PdkvVersion.cmake).
"""

from pdkv._version import LEASE_WIRE_VERSION, PROTOCOL_VERSION, TCP_WIRE_VERSION, __version__

_KV_NAMES = ("KVPoll", "KVArgs", "KVTransferError", "BootstrapServer", "KVManager", "KVSender",
             "KVReceiver", "device_health")
# Explicit PDKV_* settings for a KVManager (pdkv.config, made from the native catalog).
_CONFIG_NAMES = ("Config",)
# Pure Python (no native module): why and where a room failed (KVTransferError.cause/.stage).
_FAILURE_NAMES = ("FailureCause", "FailureStage")

_SUBMODULES = ("plan", "kv", "config", "metrics", "log")

__all__ = [*_SUBMODULES, *_KV_NAMES, *_FAILURE_NAMES, *_CONFIG_NAMES]


def __getattr__(name):
    if name in _KV_NAMES:
        from pdkv import kv

        return getattr(kv, name)
    if name in _CONFIG_NAMES:
        from pdkv import config

        return getattr(config, name)
    if name in _FAILURE_NAMES:
        from pdkv import failure

        return getattr(failure, name)
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"pdkv.{name}")
    raise AttributeError(f"module 'pdkv' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
