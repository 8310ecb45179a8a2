R=$OUT/r; mkdir -p $R
G=build-sweep/gemm_sweep
for shape in "256 4096 4096" "256 6144 4096" "256 12288 4096" "256 24576 4096" "256 4096 12288"; do
  for s in outer vec128 block scalar; do
    timeout 60 $G $shape --scales $s --top 0 >> $R/heur.log 2>&1
  done
  timeout 60 $G $shape --bf16 --top 0 >> $R/heur.log 2>&1
done
timeout 200 $G 256 4096 4096 --scales vec128 --top 10 > $R/sweep_vec128_4096.log 2>&1
timeout 100 $G 256 4096 12288 --scales vec128 --top 10 > $R/sweep_vec128_down.log 2>&1
grep -E "gemm_sweep M|heuristic #0 " $R/heur.log
tail -12 $R/sweep_vec128_4096.log
