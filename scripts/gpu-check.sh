#!/usr/bin/env bash
# The GPU check: everything toolq claims about one NVIDIA GPU, in one run that fits in 15 minutes.
#
#   bash scripts/gpu-check.sh          # on a machine with an NVIDIA GPU and the CUDA toolkit (nvcc)
#   bash scripts/gpu-check.sh --cpu    # every step but the CUDA build, on the CPU path (a rehearsal)
#   ... --skip-build                   # use the venv TOOLQ_VENV names as it is (a machine prepared ahead)
#
# 1. build: llama-cpp-python for this GPU's architecture only (nvidia-smi's compute_cap, e.g. 90 on
#    an H100), lean (scripts/llama-build.sh), into .venv-cuda (TOOLQ_VENV); a wheel already in the
#    cache (TOOLQ_WHEEL_CACHE, default ~/.cache/toolq/wheels) is reused, and a venv that already
#    offloads to the GPU is used as it is. --cpu: the CPU setup (.venv).
# 2. job: `toolq demo --gpu 0`: Redis, a worker with --gpu 0, the gateway, one real tool-calling job
#    on the bundled SmolLM2; it must end with `final`.
# 3. batch: bench/bench_batch.py at 1, 4, 16 and 32 sequences, each against its anchor (the tight
#    llama_decode loop of the same run).
# 4. workload W: bench/bench_workload.py at slots 16 and 1, slots 1 being the anchor.
# Every step's time is printed at the end with the figures, each figure as a ratio against its
# anchor. Logs: $GPU_CHECK_OUT (default test-artifacts/gpu-check/). Exit status: the first failed step's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

mode=gpu
skip_build=0
for arg in "$@"; do
  case "$arg" in
    --cpu) mode=cpu ;;
    --skip-build) skip_build=1 ;;
    *) echo "gpu-check: unknown option $arg (--cpu, --skip-build)" >&2; exit 2 ;;
  esac
done
out="${GPU_CHECK_OUT:-$root/test-artifacts/gpu-check}"
mkdir -p "$out"
# shellcheck source=scripts/llama-build.sh
source "$root/scripts/llama-build.sh"

if [ "$mode" = gpu ]; then
  command -v nvidia-smi >/dev/null || { echo "gpu-check: no nvidia-smi; --cpu rehearses the rest" >&2; exit 2; }
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '. ')"
  gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
  export TOOLQ_VENV="${TOOLQ_VENV:-$root/.venv-cuda}"
  threads="${GPU_CHECK_THREADS:-4}"
  jobs="${GPU_CHECK_JOBS:-32}"
  tokens="${GPU_CHECK_TOKENS:-64}"
  workload_timeout=300
  gpu_args=(--gpu 0)
  batch_args=(--gpu-layers -1)
  echo "gpu-check: $gpu_name, compute capability $arch"
else
  export TOOLQ_VENV="${TOOLQ_VENV:-$root/.venv}"
  threads="${GPU_CHECK_THREADS:-2}"
  jobs="${GPU_CHECK_JOBS:-16}"
  tokens="${GPU_CHECK_TOKENS:-32}"
  workload_timeout=600
  gpu_args=()
  batch_args=()
  echo "gpu-check --cpu: every step but the CUDA build, on the CPU path"
fi
py="$TOOLQ_VENV/bin/python"

steps=()
failed=0
run_step() {  # run_step NAME CMD...: time it, keep its output in $out/NAME.log (and show it)
  local name="$1" start rc
  shift
  echo
  echo "== $name: $*"
  start=$(date +%s)
  set +e
  "$@" 2>&1 | tee "$out/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  steps+=("$(printf '%-9s %5d s  %s' "$name" "$(( $(date +%s) - start ))" "$([ "$rc" = 0 ] && echo ok || echo "FAILED ($rc)")")")
  if [ "$rc" != 0 ] && [ "$failed" = 0 ]; then failed=$rc; fi
  return 0
}

offloads() {
  [ -x "$py" ] && "$py" -c "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)" 2>/dev/null
}

build() {
  if [ "$skip_build" = 1 ]; then
    echo "build skipped (--skip-build): $("$py" -c 'import llama_cpp; print("llama_cpp", llama_cpp.__version__, "from", llama_cpp.__file__)')"
    [ "$mode" = cpu ] || offloads || { echo "that venv's llama-cpp-python does not offload to the GPU" >&2; return 4; }
    return 0
  fi
  if [ "$mode" = gpu ]; then
    if offloads; then
      echo "the venv's llama-cpp-python already offloads to the GPU: kept"
      return 0
    fi
    command -v nvcc >/dev/null || { echo "no nvcc: the CUDA build needs the CUDA toolkit" >&2; return 3; }
    TOOLQ_CUDA=1 TOOLQ_CUDA_ARCH="$arch" bash scripts/setup.sh
    offloads || { echo "the build does not offload to the GPU" >&2; return 4; }
  else
    bash scripts/setup.sh
  fi
}

run_step build build
if [ "$failed" = 0 ]; then
  run_step job "$TOOLQ_VENV/bin/toolq" demo "${gpu_args[@]}"
  run_step batch "$py" bench/bench_batch.py --seqs 1,4,16,32 --tokens "$tokens" --runs 1 \
    --threads "$threads" "${batch_args[@]}"
  run_step workload "$py" bench/bench_workload.py --slots 16,1 --jobs "$jobs" --clients 16 \
    --timeout-s "$workload_timeout" "${gpu_args[@]}"
fi

echo
echo "== gpu-check ($mode) summary"
printf '%s\n' "${steps[@]}"
if [ -f "$out/job.log" ]; then
  grep -E "worker registered|rounds," "$out/job.log" || true
fi
if [ -f "$out/batch.log" ]; then
  echo "-- batch: engine tok/s against the anchor (tight llama_decode loop, same run); target ratio >= 0.9"
  sed -n '/^seqs /,/^target/p' "$out/batch.log"
fi
if [ -f "$out/workload.log" ]; then
  echo "-- workload W: slots 16 against slots 1 (same run)"
  grep -E "^ +(jobs/s|single job) slots=" "$out/workload.log" || true
  grep -E "^3\. failed jobs" "$out/workload.log" || true
fi
echo "logs in $out"
exit "$failed"
