#!/usr/bin/env bash
# CTest `install_consumers`: installs the build into a temporary prefix, then, from outside
# the tree, builds and runs the consumer (consumer/main.cc: two engines move bytes) once
# through find_package(pdkv) and once through pkg-config, and runs the installed CLI.
# Usage: install_consumers_test.sh <build dir> <expected version>
set -euo pipefail
build=$(realpath "$1")
version=$2
here=$(dirname "$(realpath "$0")")
tmp=$(mktemp -d /tmp/pdkv-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
echo "installed into $prefix: $(find "$prefix" -type f | wc -l) files"

# Every quoted include in an installed header must resolve inside include/ (nothing may
# point back at the source tree's layout).
missing=0
while IFS= read -r -d '' h; do
  while IFS= read -r inc; do
    if [[ ! -f $prefix/include/$inc ]]; then
      echo "FAIL: ${h#"$prefix"/} includes \"$inc\", not installed"
      missing=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$h")
done < <(find "$prefix/include/pdkv" -name '*.h' -print0)
((missing == 0)) || exit 1

lib=$(find "$prefix" -name "libpdkv.so.*.*" | head -n 1)
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[[ $soname == "libpdkv.so.${version%%.*}" ]] || { echo "FAIL: SONAME '$soname'"; exit 1; }
echo "library ${lib#"$prefix"/}, SONAME $soname"

# 1. find_package(pdkv) + pdkv::pdkv.
cmake -S "$here/consumer" -B "$tmp/cmake-consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/cmake-consumer" >"$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
"$tmp/cmake-consumer/pdkv_consumer" "$version"

# 2. pkg-config (the .pc finds its prefix from its own location).
pcdir=$(dirname "$(find "$prefix" -name pdkv.pc)")
[[ $(PKG_CONFIG_PATH=$pcdir pkg-config --modversion pdkv) == "$version" ]]
# shellcheck disable=SC2046  # pkg-config's output is a list of flags
c++ -std=c++20 -O1 "$here/consumer/main.cc" -o "$tmp/pc-consumer" \
  $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs pdkv) -Wl,-rpath,"$(dirname "$lib")"
"$tmp/pc-consumer" "$version"

# 3. The installed CLI: its version, and a Python-driven sub-command found relative to it.
"$prefix/bin/pdkv" --version | grep -qx "pdkv $version (.*)"
"$prefix/bin/pdkv" bench e2e --help | grep -q -- "--case"
echo "installed CLI: $("$prefix/bin/pdkv" --version); bench e2e --help OK"

# 4. Relocatable: the moved tree still works (nothing in it names the prefix it was
# installed to: the CLI searches relative to itself, pdkv.pc uses ${pcfiledir}).
mv "$prefix" "$tmp/moved"
"$tmp/moved/bin/pdkv" demo --help | grep -q -- "--tp-decode"
pcdir=${pcdir/#"$prefix"/"$tmp/moved"}
[[ $(PKG_CONFIG_PATH=$pcdir pkg-config --variable=includedir pdkv) -ef $tmp/moved/include ]]
echo "moved install: CLI and pdkv.pc still resolve"
