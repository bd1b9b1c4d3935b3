"""pdkv: KV-cache transfer for prefill/decode disaggregated LLM serving.

Sub-modules are imported on demand (``import pdkv.plan``), so importing the package never
fails because one native module is missing.
"""

__all__ = ["plan"]
