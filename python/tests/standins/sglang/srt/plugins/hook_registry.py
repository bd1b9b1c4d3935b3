"""Stand-in for sglang/srt/plugins/hook_registry.py: REPLACE (class or function) and
AROUND hooks on a dotted target, applied once, and the patched object swapped into every
module that imported the original by name (as upstream propagates it)."""
import enum
import pkgutil
import sys
from collections import defaultdict


class HookType(enum.Enum):
    BEFORE = "before"
    AFTER = "after"
    AROUND = "around"
    REPLACE = "replace"


class HookRegistry:
    _hooks = defaultdict(list)
    _patched = set()

    @classmethod
    def register(cls, target, hook, hook_type=HookType.AFTER, *, source=None):
        cls._hooks[target].append((hook_type, hook))

    @classmethod
    def apply_hooks(cls):
        for target, hooks in cls._hooks.items():
            if target in cls._patched:
                continue
            owner_path, name = target.rsplit(".", 1)
            owner = pkgutil.resolve_name(owner_path)
            original = getattr(owner, name)
            patched = original
            for hook_type, hook in sorted(hooks, key=lambda h: h[0] != HookType.REPLACE):
                if hook_type == HookType.REPLACE:
                    patched = hook
                elif hook_type == HookType.AROUND:
                    patched = (lambda inner, h: lambda *a, **k: h(inner, *a, **k))(patched, hook)
            setattr(owner, name, patched)
            for module in list(sys.modules.values()):
                for attr, value in list(getattr(module, "__dict__", {}).items()):
                    if value is original and module is not owner:
                        setattr(module, attr, patched)
            cls._patched.add(target)
