"""kv.pyi must describe pdkv.kv as it is: every class and method in the stub exists with
the same parameter names, and every public method of the API is in the stub."""
import ast
import inspect
import pathlib

import pdkv.kv as kv

STUB = pathlib.Path(kv.__file__).with_name("kv.pyi")


def stub_classes():
    tree = ast.parse(STUB.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {f.name: [a.arg for a in f.args.args + f.args.kwonlyargs]
                              for f in node.body if isinstance(f, ast.FunctionDef)}
    return out


def test_every_stubbed_method_exists_with_the_same_parameters():
    for cls_name, methods in stub_classes().items():
        cls = getattr(kv, cls_name)
        for name, params in methods.items():
            member = inspect.getattr_static(cls, name)
            if isinstance(member, property):
                continue
            real = [p for p in inspect.signature(getattr(cls, name)).parameters
                    if p not in ("fields", "exc")]
            assert [p for p in params if p not in ("fields", "exc")] == real, (cls_name, name)


def test_every_public_method_is_stubbed():
    stub = stub_classes()
    for cls_name in ("BootstrapServer", "KVManager", "KVSender", "KVReceiver"):
        cls = getattr(kv, cls_name)
        public = {n for n, _ in inspect.getmembers(cls) if not n.startswith("_")}
        stubbed = set(stub[cls_name]) | set(stub.get("_Room", {}))
        missing = public - stubbed - {"mode", "args", "bootstrap_addr", "bootstrap_room"}
        assert not missing, (cls_name, missing)
