# run_all: alone (two MPI ranks on the two cores, under a timeout)
# Data parallel equals one process: 20 steps with mpirun -np 2 (each rank half
# of every batch of 16 sequences, the gradients summed with MPI_Allreduce)
# leave the same weights and Adam state as one process on the whole batch, to
# float32 summation order; mpirun -np 1 is the one-process run bit for bit.
source "$(dirname "$0")/mpi_lib.bash"
cd "$QKV_TMP"
expect_ok "$TRAIN" "${RUN[@]}" --steps 20 --out one
expect_ok "${MPIRUN[@]}" -np 1 "$MPI_TRAIN" "${RUN[@]}" --steps 20 --out np1
data_equal one/model.safetensors np1/model.safetensors || fail "mpirun -np 1 differs from one process"

expect_ok "${MPIRUN[@]}" -np 2 "$MPI_TRAIN" "${RUN[@]}" --steps 20 --out np2
expect_out "data parallel: 2 MPI ranks"
expect_out "gradient allreduce over 2 MPI ranks"
[ "$(grep -c "^trained 20 steps" "$QKV_TMP/out")" -eq 1 ] || fail "rank 1 printed too (or nobody did): want one closing line"
expect_close one/model.safetensors np2/model.safetensors 1e-5 "np 2 vs one process after 20 steps"
# The loss each step reports is the global batch's (the ranks' shares summed).
loss_gap=$(paste -d, <(cut -d, -f2 one/log.csv) <(cut -d, -f2 np2/log.csv) |
  awk -F, 'NR > 1 && $1 != "" { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++ } END { print (n == 20 ? m + 0 : "rows " n) }')
awk -v g="$loss_gap" 'BEGIN { exit !(g + 0 == g && g <= 1e-5) }' || fail "np 2 logged other losses than one process: $loss_gap"
# ... and they are not trivially equal: 2 ranks are not 1 (float order differs).
data_equal one/model.safetensors np2/model.safetensors && echo "note: bit-identical (sums happened to agree)"

# The same with an odd batch (shares of 7 and 6 sequences, unequal token
# counts) and a decoder-only model: the token weighting is what makes it equal.
expect_ok "$TRAIN" "${RUN[@]}" --model gpt --batch 13 --steps 20 --out gpt1
expect_ok "${MPIRUN[@]}" -np 2 "$MPI_TRAIN" "${RUN[@]}" --model gpt --batch 13 --steps 20 --out gpt2
expect_close gpt1/model.safetensors gpt2/model.safetensors 1e-5 "gpt, batch 13, np 2 vs one process"
# Only rank 0 writes the run's files.
[ -f np2/log.csv ] && [ -f np2/loss.svg ] || fail "rank 0 wrote no log or plot"
