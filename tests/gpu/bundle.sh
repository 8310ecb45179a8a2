#!/usr/bin/env bash
# Makes a small folder with what tests/gpu/run.sh needs on the GPU machine, from a CUDA build
# made here: the three GPU binaries and the fp8rl CLI (stripped; cli_logits.sh runs the CLI)
# and the non-CUDA shared libraries they link that
# the GPU image may lack (libfmt, libgomp, libpcre2-8, libyaml-cpp, libprotobuf-lite, libisal,
# and fp8rl's libedit with the libbsd and libmd it links, and its cpp-httplib with the
# OpenSSL and brotli libraries that links),
# as one xz archive (bundle.tgz, ~37 MB rather than ~110, so that it travels to the GPU machine
# with the repository) that env.sh unpacks in place (tar -xf detects the compression).
# cuBLASLt comes from the GPU machine's CUDA.
#
#   tests/gpu/bundle.sh [BUILD_DIR] [BUNDLE_DIR]      (defaults: build-cuda, build-gpu)
set -eu
BUILD=${1:-build-cuda}
BUNDLE=${2:-build-gpu}
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/tests/gpu" "$BUNDLE/bin" "$BUNDLE/lib"
for b in test_ops test_model_gpu test_generate_gpu test_train_gpu fp8rl_bench; do
  strip -o "$BUNDLE/tests/gpu/$b" "$BUILD/tests/gpu/$b"
done
strip -o "$BUNDLE/bin/fp8rl" "$BUILD/src/cli/fp8rl"
for lib in libfmt.so libgomp.so libpcre2-8.so libyaml-cpp.so libprotobuf-lite.so libisal.so \
  libedit.so libbsd.so libmd.so libcpp-httplib.so libssl.so libcrypto.so libbrotlicommon.so \
  libbrotlidec.so libbrotlienc.so; do
  path=$(ldd "$BUILD/tests/gpu/test_ops" "$BUILD/src/cli/fp8rl" |
    awk -v l="$lib" 'index($1, l) == 1 {print $3; exit}')
  [ -n "$path" ] && cp -L "$path" "$BUNDLE/lib/"
done
tar -C "$BUNDLE" -cf - tests bin lib | xz -T2 -6 > "$BUNDLE.tgz.tmp"
rm -rf "$BUNDLE/tests" "$BUNDLE/bin" "$BUNDLE/lib"
mv "$BUNDLE.tgz.tmp" "$BUNDLE/bundle.tgz"
du -sh "$BUNDLE"
