# Sourced by the GPU scripts (run.sh, engine.sh) with BUILD set: unpacks a bundle once, and
# sets BIN, LD_LIBRARY_PATH (the bundle's libraries, then cuBLASLt from the CUDA toolkit or the
# PyTorch wheel), SANITIZER and CUOBJDUMP; defines step() (needs SUMMARY and start).
BIN="$BUILD/tests/gpu"
# A bundle travels as one archive; unpack it once.
if [ -f "$BUILD/bundle.tgz" ] && [ ! -x "$BIN/test_ops" ]; then
  tar -C "$BUILD" -xf "$BUILD/bundle.tgz" || { echo "cannot unpack $BUILD/bundle.tgz"; exit 1; }
fi
# Shared libraries: the bundle's own (libfmt, libgomp of the build machine) first, then
# cuBLASLt from the CUDA toolkit or the PyTorch wheel, wherever this machine has it.
LIBS="$BUILD/lib"
for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null); do
  [ -e "$d/libcublasLt.so.13" ] && LIBS="$LIBS:$d"
done
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)

# step NAME LOG SECONDS CMD...: appends the command's output to LOG, its status to the summary.
step() {
  local name=$1 log=$2 secs=$3
  shift 3
  echo "=== $name: $*" >> "$log"
  local t0=$(date +%s)
  timeout "$secs" "$@" >> "$log" 2>&1
  local rc=$?
  local status=ok
  [ $rc -eq 124 ] && status="TIMEOUT after ${secs}s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && status="FAILED rc=$rc"
  printf '%-28s %-22s %4ss  (t=%ss)\n' "$name" "$status" "$(( $(date +%s) - t0 ))" \
    "$(( $(date +%s) - start ))" >> "$SUMMARY"
}
