#!/usr/bin/env bash
# CTest `deb_package`: builds pdkv_<version>_amd64.deb with CPack, checks its control
# fields (Depends from dpkg-shlibdeps plus python3/numpy, each satisfied by this Debian)
# and its file list, then unpacks it (dpkg -x, no root needed) and runs the unpacked
# /usr/bin/pdkv: --version and `pdkv demo`, which must find its Python package under the
# unpacked /usr/lib/python3/dist-packages with no PYTHONPATH.
# Usage: deb_test.sh <build dir> <expected version>
set -euo pipefail
build=$(realpath "$1")
version=$2
tmp=$(mktemp -d /tmp/pdkv-deb-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export PYTHONDONTWRITEBYTECODE=1

cpack --config "$build/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" || { cat "$tmp/cpack.log"; exit 1; }
deb=$tmp/out/pdkv_${version}_amd64.deb
[[ -f $deb ]] || { echo "FAIL: no $(basename "$deb")"; ls "$tmp/out"; exit 1; }
echo "built $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"

depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
# libmicrohttpd12: the HTTP servers (http/http_listener.h).
for want in libc6 libstdc++6 libzmq5 libmicrohttpd12 python3 python3-numpy; do
  [[ ", $depends," == *", $want "* || ", $depends," == *", $want,"* ]] ||
    { echo "FAIL: Depends lacks $want"; exit 1; }
done
# Every dependency (first alternative) is installed here in a satisfying version, as apt
# would require of a fresh Debian 12.
IFS=',' read -ra items <<<"$depends"
for item in "${items[@]}"; do
  item=${item%%|*}
  read -r pkg op ver <<<"$(sed -E 's/^ *([^ (]+) *(\(([<>=]+) *([^)]+)\))?.*/\1 \3 \4/' <<<"$item")"
  have=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) || { echo "FAIL: $pkg not installable here"; exit 1; }
  if [[ -n ${op:-} ]]; then
    dpkg --compare-versions "$have" "$op" "$ver" || { echo "FAIL: $pkg $have is not $op $ver"; exit 1; }
  fi
done

dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$tmp/contents"
for f in /usr/bin/pdkv /usr/bin/pdkv_engine_peer /usr/include/pdkv/version.h /usr/include/pdkv/engine/transfer_engine.h \
         /usr/lib/cmake/pdkv/pdkvConfig.cmake /usr/lib/cmake/pdkv/pdkvConfigVersion.cmake \
         /usr/lib/pkgconfig/pdkv.pc /usr/lib/python3/dist-packages/pdkv/__init__.py \
         /usr/lib/python3/dist-packages/pdkv/_tools/demo/main.py \
         "/usr/lib/python3/dist-packages/pdkv-$version.dist-info/entry_points.txt" \
         /usr/lib/python3/dist-packages/pdkv-sglang.pth; do
  grep -qx "$f" "$tmp/contents" || { echo "FAIL: $f is not in the package"; exit 1; }
done
grep -Eq "^/usr/lib/libpdkv\.so\.${version%%.*}(\.|$)" "$tmp/contents" || { echo "FAIL: no libpdkv.so"; exit 1; }
dpkg-deb -I "$deb" shlibs | grep -q "^libpdkv ${version%%.*} pdkv" || { echo "FAIL: no shlibs entry"; exit 1; }

dpkg-deb -x "$deb" "$tmp/root"
# On a fresh Debian 12 only what Depends names is installed: every shared library any
# packaged ELF file needs must come from one of those packages (or be libpdkv itself),
# not from something this build host happens to have.
dep_pkgs=" $(sed -E 's/\([^)]*\)//g; s/\|[^,]*//g; s/:any//g; s/,/ /g' <<<"$depends" | xargs) "
while IFS= read -r elf; do
  while IFS= read -r lib; do
    [[ $lib == libpdkv.so* ]] && continue
    path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ && !found {print $NF; found = 1}')
    [[ -n $path ]] || { echo "FAIL: $elf needs $lib, which no installed package provides"; exit 1; }
    # Merged /usr: dpkg knows a file under the path its package shipped it at.
    owner=$(dpkg -S "$path" 2>/dev/null || dpkg -S "$(realpath "$path")" 2>/dev/null || true)
    owner=${owner%%:*}
    [[ -n $owner ]] || { echo "FAIL: $lib ($path) belongs to no Debian package"; exit 1; }
    # Depends may name the package or a name it Provides (libspdlog1.10-fmt9).
    provides=$(dpkg-query -W -f='${Provides}' "$owner" 2>/dev/null || true)
    names=" $owner $(sed -E 's/\([^)]*\)//g; s/,/ /g' <<<"$provides") "
    found=no
    for name in $names; do [[ $dep_pkgs == *" $name "* ]] && found=yes; done
    [[ $found == yes ]] ||
      { echo "FAIL: $elf needs $lib from $owner, which Depends does not name"; exit 1; }
  done < <(objdump -p "$elf" 2>/dev/null | awk '/NEEDED/ {print $2}')
done < <(find "$tmp/root" -type f \( -name '*.so*' -o -perm -u+x \) -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
echo "every NEEDED library of the packaged ELF files comes from a package in Depends"
cd "$tmp"
"$tmp/root/usr/bin/pdkv" --version | grep -qx "pdkv $version (.*)"
"$tmp/root/usr/bin/pdkv" demo --no-bench --tokens 4 --prompt-len 12
# The demo's benchmark step starts pdkv_engine_peer from the CLI's directory.
"$tmp/root/usr/bin/pdkv" bench engine --tokens 256 --page 16 --rounds 1 --iperf-seconds 1 >/dev/null
# sglang finds the backend name `pdkv` through this entry point (importlib.metadata reads
# the dist-info beside the package); it must name a function that exists.
EP_CHECK='from importlib.metadata import entry_points
eps = [e for e in entry_points(group="sglang.srt.plugins") if e.name == "pdkv"]
assert len(eps) == 1, eps
assert callable(eps[0].load()), eps[0]
print("sglang plugin entry point:", eps[0].value)'
PYTHONPATH="$tmp/root/usr/lib/python3/dist-packages" /usr/bin/python3 -c "$EP_CHECK"
# What site-packages runs at interpreter start: the hook that adds the name `pdkv` in
# sglang processes that never load plugins.
PTH_CHECK='import sys
exec(open(sys.argv[1]).read())
from pdkv.integrations.sglang.install import _PatchAfterImport
assert any(isinstance(f, _PatchAfterImport) for f in sys.meta_path), sys.meta_path
print("sglang .pth hook installed")'
PYTHONPATH="$tmp/root/usr/lib/python3/dist-packages" /usr/bin/python3 -c "$PTH_CHECK" \
  "$tmp/root/usr/lib/python3/dist-packages/pdkv-sglang.pth"
echo "deb $version: Depends satisfied here; unpacked /usr/bin/pdkv ran the demo from its own package"
