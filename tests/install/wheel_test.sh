#!/usr/bin/env bash
# CTest `wheel_install`: builds the wheel offline (python/packaging/build_wheel.py), installs
# it into a fresh venv (--system-site-packages, for Debian's numpy) with pip --no-index,
# then, from an empty directory and with no PYTHONPATH (neither the source tree nor
# build/python is reachable), imports pdkv from the venv and runs `pdkv demo`: a bootstrap
# server, a prefill and a decode process moving the KV cache over pdkv, checked against
# the colocated model.
# Usage: wheel_test.sh <source dir> <build dir> <expected version>
set -euo pipefail
src=$(realpath "$1")
build=$(realpath "$2")
version=$3
tmp=$(mktemp -d /tmp/pdkv-wheel-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
unset PYTHONPATH PDKV_BIN_DIR PDKV_PYTHON_DIR
export PYTHONDONTWRITEBYTECODE=1

wheel=$(/usr/bin/python3 "$src/python/packaging/build_wheel.py" --build-dir "$build" \
        --out-dir "$tmp/dist" --stage-dir "$tmp/stage")
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
[[ $(basename "$wheel") == pdkv-$version-cp3*-linux_x86_64.whl ]]
/usr/bin/python3 -m zipfile -l "$wheel" | awk '{print $1}' >"$tmp/contents"
for f in pdkv/__init__.py pdkv/_bin/pdkv pdkv/_bin/pdkv_engine_peer pdkv/_tools/demo/main.py pdkv/_tools/bench/e2e/main.py \
         pdkv/_tools/robustness/chaos/main.py pdkv/_tools/robustness/hostile/hostile.py \
         pdkv/testing/__init__.py pdkv/testing/etcd.py; do
  grep -qx "$f" "$tmp/contents" || { echo "FAIL: $f is not in the wheel"; exit 1; }
done
grep -q '^pdkv/_native\..*\.so$' "$tmp/contents" || { echo "FAIL: no pdkv/_native*.so"; exit 1; }

# Debian's pip installs into the venv (--python): the same install as venv/bin/pip, without
# the seconds ensurepip spends copying pip into every fresh venv.
/usr/bin/python3 -m venv --without-pip --system-site-packages "$tmp/venv"
/usr/bin/python3 -m pip --python "$tmp/venv/bin/python" install --no-index --quiet "$wheel"

mkdir "$tmp/elsewhere" && cd "$tmp/elsewhere"
site=$("$tmp/venv/bin/python" -c "import pdkv, os; print(os.path.dirname(os.path.dirname(pdkv.__file__)))")
[[ $site == "$tmp/venv/"* ]] || { echo "FAIL: pdkv imported from $site, not the venv"; exit 1; }
"$tmp/venv/bin/python" -c "import pdkv, pdkv._native, pdkv.plan; assert pdkv.__version__ == '$version'"
# sglang finds the backend name `pdkv` through this entry point (importlib.metadata reads
# the dist-info beside the package); it must name a function that exists.
EP_CHECK='from importlib.metadata import entry_points
eps = [e for e in entry_points(group="sglang.srt.plugins") if e.name == "pdkv"]
assert len(eps) == 1, eps
assert callable(eps[0].load()), eps[0]
print("sglang plugin entry point:", eps[0].value)'
"$tmp/venv/bin/python" -c "$EP_CHECK"
"$tmp/venv/bin/pdkv" --version | grep -qx "pdkv $version (.*)"
"$tmp/venv/bin/pdkv" demo --no-bench --tokens 4 --prompt-len 12
echo "wheel $version: installed into a fresh venv; pdkv demo passed from the installed package"
