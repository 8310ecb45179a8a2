set -u
G=build-sweep/gemm_sweep; R=$OUT; 
for shape in "256 4096 4096" "256 4096 12288" "256 6144 4096" "256 12288 4096" "256 24576 4096"; do
  for s in 1 2 3 4; do
    for o in "" "--f32-out"; do
      set -- $shape
      [ $(( $3 % s )) -eq 0 ] || continue
      timeout 100 $G $shape --splitk $s $o --top 0 > /tmp/o.txt 2>&1
      echo "== $shape split $s $o"; grep -E "gemm_sweep M|heuristic #[0-2] |error" /tmp/o.txt
    done
  done
done 2>&1 | tee $R/sweep.log
