"""A site directory holding pdkv's distribution metadata as the wheel and the .deb install
it (the entry_points.txt the .deb ships, and the wheel declares the same), so that
importlib.metadata, and through it sglang's load_plugins(), finds pdkv's plugin in a test
process without installing the package."""
import os
import shutil

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(REPO, "cmake", "templates", "dist-info")


def make_plugin_site(root: str) -> str:
    info = os.path.join(root, "pdkv-0.0.0.dist-info")
    os.makedirs(info, exist_ok=True)
    shutil.copy(os.path.join(SHIPPED, "entry_points.txt"), info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: pdkv\nVersion: 0.0.0\n")
    return root
