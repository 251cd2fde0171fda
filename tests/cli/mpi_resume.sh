# run_all: alone (two MPI ranks on the two cores, under a timeout)
# Checkpoints move between rank counts: a 2-rank run's checkpoint resumes in
# one process, and a one-process checkpoint under mpirun -np 2, each landing
# (to float32 summation order) where an uninterrupted one-process run does. A
# 2-rank run with dropout, stopped and resumed with 2 ranks, is bit for bit
# the uninterrupted 2-rank run: each rank's dropout stream is in the file.
source "$(dirname "$0")/mpi_lib.bash"
cd "$QKV_TMP"
# A constant learning rate: the cosine schedule's length is --steps, which a
# resume changes, so only with a constant rate is "10 + 10" the same run as 20.
RUN+=(--schedule constant)
expect_ok "$TRAIN" "${RUN[@]}" --steps 20 --out whole

expect_ok "${MPIRUN[@]}" -np 2 "$MPI_TRAIN" "${RUN[@]}" --steps 10 --out a
expect_ok "$TRAIN" --load a/model.safetensors --steps 20 --out a_then_one --no-early-stop
expect_out "from step 10"
expect_close whole/model.safetensors a_then_one/model.safetensors 1e-5 "2 ranks to step 10, then one process"

expect_ok "$TRAIN" "${RUN[@]}" --steps 10 --out b
expect_ok "${MPIRUN[@]}" -np 2 "$MPI_TRAIN" --load b/model.safetensors --steps 20 --out b_then_two --no-early-stop
expect_out "from step 10"
expect_close whole/model.safetensors b_then_two/model.safetensors 1e-5 "one process to step 10, then 2 ranks"

# Dropout: the ranks draw different masks, and a resume continues each one's.
expect_ok "${MPIRUN[@]}" -np 2 "$MPI_TRAIN" "${RUN[@]}" --dropout 0.2 --steps 20 --out d_whole
expect_ok "${MPIRUN[@]}" -np 2 "$MPI_TRAIN" "${RUN[@]}" --dropout 0.2 --steps 10 --out d_half
expect_ok "${MPIRUN[@]}" -np 2 "$MPI_TRAIN" --load d_half/model.safetensors --steps 20 --out d_rest --no-early-stop
data_equal d_whole/model.safetensors d_rest/model.safetensors ||
  fail "a resumed 2-rank run with dropout is not the uninterrupted one: $(max_gap d_whole/model.safetensors d_rest/model.safetensors)"
grep -aq '"dropout_gen_ranks"' d_half/model.safetensors || fail "the checkpoint lacks the ranks' dropout streams"
# With dropout the 2-rank run is not the one-process run (rank 1 masks differently).
expect_ok "$TRAIN" "${RUN[@]}" --dropout 0.2 --steps 20 --out d_one
data_equal d_one/model.safetensors d_whole/model.safetensors && fail "rank 1 used rank 0's dropout stream"
exit 0
