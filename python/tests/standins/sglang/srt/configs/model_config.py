"""Stand-in for sglang/srt/configs/model_config.py: ModelConfig.from_server_args and
get_total_num_kv_heads, over a model directory's config.json (num_key_value_heads, else
num_attention_heads, as upstream reads a plain HF config)."""
import json
import os


class ModelConfig:
    def __init__(self, hf_config: dict):
        self.hf_config = hf_config

    @staticmethod
    def from_server_args(server_args, model_path=None, model_revision=None,
                         is_draft_model=False, **kwargs):
        with open(os.path.join(model_path or server_args.model_path, "config.json")) as f:
            return ModelConfig(json.load(f))

    def get_total_num_kv_heads(self) -> int:
        return int(self.hf_config.get("num_key_value_heads",
                                      self.hf_config["num_attention_heads"]))
