#!/usr/bin/env bash
# Builds strata's Debian packages with dpkg-deb (make deb):
#   libstrata0      /usr/lib/<multiarch>/libstrata.so.0 (the malloc replacement, for LD_PRELOAD or
#                   linking)
#   libstrata-dev   headers, libstrata.so, the static libraries, strataConfig.cmake, strata.pc
# From a build of the libraries only (no tests) configured for /usr, in its own build directory;
# cmake --install's components "runtime" and "dev" make the split.
# Usage: packaging/deb/build-deb.sh [OUT_DIR [BUILD_DIR]]   (default: build/deb build-deb)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$(realpath -m "${1:-$src/build/deb}")
build=$(realpath -m "${2:-$src/build-deb}")

version=$(sed -n 's/^project(strata VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
soversion=${version%%.*}

cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_TESTS=OFF \
      -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_INSTALL_LIBDIR="lib/$multiarch" >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null

stage=$build/deb-stage
rm -rf "$stage"
mkdir -p "$out"
runtime=libstrata$soversion

package() {  # package NAME COMPONENT SECTION DESCRIPTION [control lines...]
  local name=$1 component=$2 section=$3 description=$4
  shift 4
  local root=$stage/$name
  # Stripped (Debian policy): the exported names stay in the dynamic symbol table.
  DESTDIR=$root cmake --install "$build" --component "$component" --strip >/dev/null
  mkdir -p "$root/DEBIAN"
  {
    echo "Package: $name"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: strata developers <strata@localhost>"
    echo "Section: $section"
    echo "Priority: optional"
    echo "Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)"
    printf '%s\n' "$@"
    echo "Description: $description"
  } > "$root/DEBIAN/control"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
     xargs -0 -r md5sum > DEBIAN/md5sums)
  dpkg-deb --root-owner-group -Zxz --build "$root" "$out/${name}_${version}_${arch}.deb" >/dev/null
  echo "$out/${name}_${version}_${arch}.deb"
}

mkdir -p "$stage/$runtime/DEBIAN"
echo "libstrata $soversion $runtime (>= $version)" > "$stage/$runtime/DEBIAN/shlibs"
echo "activate-noawait ldconfig" > "$stage/$runtime/DEBIAN/triggers"
# Python writes strata_gpu's bytecode beside it when root imports it: dpkg did not install those
# files and, without this, would leave them and their directories behind on removal.
printf '%s\n' '#!/bin/sh' 'set -e' \
  "rm -rf \"\$DPKG_ROOT/usr/lib/$multiarch/strata/python/strata_gpu/__pycache__\"" \
  > "$stage/$runtime/DEBIAN/prerm"
chmod 755 "$stage/$runtime/DEBIAN/prerm"
# The runtime's Depends: what each of its shared objects needs (libstrata.so the C library only,
# libstrata_torch.so libstdc++ and libgcc too), from the system's shlibs and symbols files.
# dpkg-shlibdeps wants a debian/control, which this build has none of: an empty one.
DESTDIR=$stage/$runtime cmake --install "$build" --component runtime --strip >/dev/null
mkdir -p "$stage/shlibdeps/debian"
: > "$stage/shlibdeps/debian/control"
depends=$(cd "$stage/shlibdeps" &&
          find "$stage/$runtime/usr" -type f -name '*.so*' -print0 | sort -z |
          xargs -0 dpkg-shlibdeps --warnings=0 -O | sed -n 's/^shlibs:Depends=//p')
package "$runtime" runtime libs "strata memory allocator (shared library)
 A general-purpose malloc replacement: preload it
 (LD_PRELOAD=/usr/lib/$multiarch/libstrata.so.$soversion) or link it to replace malloc, free
 and the C++ operators new and delete." \
  "Multi-Arch: same" "Depends: $depends"
package libstrata-dev dev libdevel "strata memory allocator (development files)
 Headers, static libraries (with and without the malloc override, pools, GPU
 device-memory resources), CMake package (find_package(strata)) and pkg-config file." \
  "Multi-Arch: same" "Depends: $runtime (= $version)"
