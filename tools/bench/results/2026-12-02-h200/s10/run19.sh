G=build-sweep/gemm_sweep
for shape in "256 4096 4096" "256 4096 12288" "256 6144 4096"; do
  echo "== $shape"; $G $shape --top 0 --f32-out | grep heuristic
  $G $shape --splitk 2 --f32-out --halves-on-streams --top 0 | grep "two K"
done
