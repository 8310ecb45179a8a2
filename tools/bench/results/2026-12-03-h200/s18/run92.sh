# Session 18: gate and up as two concurrent GEMMs of one input (the shape of the K halves of
# N = 12,288, K = 8,192: each half is one of them), SCALAR_32F (raw) against OUTER_VEC_32F,
# bf16 out, in a CUDA graph.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
G=build-sweep/gemm_sweep
for S in outer scalar; do
  step "gate+up $S" $R/gemm.log 60 $G 256 12288 8192 --scales $S --splitk 2 --halves-on-streams --top 0
  step "qkv $S bf16out" $R/gemm.log 60 $G 256 6144 4096 --scales $S --top 0
done
grep -E "^gemm_sweep|heuristic #0 |in a CUDA graph|two K halves" $R/gemm.log >> $SUMMARY
cat $SUMMARY
