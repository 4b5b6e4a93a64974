# The one place that says how llama-cpp-python is built, sourced by scripts/setup.sh and
# scripts/gpu-check.sh. Defines LLAMA_VERSION and `llama_build <flavor> [cuda-arch]`, which sets:
#   LLAMA_CMAKE_ARGS  the CMAKE_ARGS of the build
#   LLAMA_BUILD_KEY   names the cached wheel's folder: the flavour and a hash of what the build
#                     depends on (the arguments, with the repository's path left out, and the
#                     CMake file they include), so every checkout shares one cache
# Lean: only what toolq loads, llama and ggml. No llava/mtmd (LLAVA_BUILD), no `common` library
# (scripts/cmake/no-common.cmake), no tests, tools, examples or server; curl off.
# shellcheck shell=bash

LLAMA_VERSION="0.3.36"
_llama_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

llama_build() {
  local flavor="$1" arch="${2:-}" target
  local lean="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
  lean+=" -DLLAMA_BUILD_SERVER=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF"
  case "$flavor" in
    cpu)
      # A native build emits AMX tile instructions that this CPU reports but forbids (SIGILL on
      # the first prompt): build for a portable AVX2 target instead.
      target="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" ;;
    cuda)
      # One GPU architecture (nvidia-smi's compute_cap without the dot, e.g. 90): compiling the
      # CUDA kernels for every architecture is most of a CUDA build's time.
      target="-DGGML_CUDA=on${arch:+ -DCMAKE_CUDA_ARCHITECTURES=$arch}" ;;
    *)
      echo "llama_build: flavour cpu or cuda, not '$flavor'" >&2
      return 1 ;;
  esac
  local include="$_llama_here/cmake/no-common.cmake"
  LLAMA_CMAKE_ARGS="$target $lean -DCMAKE_PROJECT_llama.cpp_INCLUDE=$include"
  LLAMA_BUILD_KEY="$flavor${arch:+-sm$arch}-$( (echo "$target $lean"; cat "$include") | sha256sum | cut -c1-12)"
}
