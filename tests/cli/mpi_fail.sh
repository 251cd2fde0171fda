# run_all: alone (two MPI ranks on the two cores, under a timeout)
# A rank that fails ends the whole run with a non-zero status and a message,
# never a hang (each mpirun is bounded by timeout; status 124 = it hung): a
# bad flag on one rank, ranks given different flags, a rank killed mid-run.
source "$(dirname "$0")/mpi_lib.bash"
cd "$QKV_TMP"
expect_status_not_hang() {
  local rc=0
  "$@" >"$QKV_TMP/out" 2>&1 || rc=$?
  [ $rc -ne 124 ] || { cat "$QKV_TMP/out"; fail "the run hung (timeout): $*"; }
  [ $rc -ne 0 ] || { cat "$QKV_TMP/out"; fail "the run exited 0: $*"; }
}
# Rank 1 has an invalid value: it stops with the flag's message, rank 0 is ended.
expect_status_not_hang "${MPIRUN[@]}" -np 1 "$MPI_TRAIN" "${RUN[@]}" --steps 1000 --out bad : \
  -np 1 "$MPI_TRAIN" "${RUN[@]}" --steps 1000 --out bad --lr -1
expect_out "--lr"
# A flag rank 0 does not know at all.
expect_status_not_hang "${MPIRUN[@]}" -np 1 "$MPI_TRAIN" "${RUN[@]}" --out bad2 --no-such-flag : \
  -np 1 "$MPI_TRAIN" "${RUN[@]}" --out bad2
expect_out "no-such-flag"
# Valid but different settings would silently train different models: refused.
expect_status_not_hang "${MPIRUN[@]}" -np 1 "$MPI_TRAIN" "${RUN[@]}" --steps 1000 --out diff : \
  -np 1 "$MPI_TRAIN" "${RUN[@]}" --steps 1000 --out diff --lr 0.001
expect_out "the MPI ranks were started with different flags"
# The same flags, but each rank reads its own copy of --data (another working
# directory) and the copies differ: refused at start, naming the rank and file.
mkdir -p wa wb
printf 'ab\tba\ncd\tdc\nef\tfe\ngh\thg\n' > wa/d.tsv
printf 'ab\tba\ncd\tdc\nef\tfe\ngh\tgg\n' > wb/d.tsv
expect_status_not_hang "${MPIRUN[@]}" -np 1 -wdir "$QKV_TMP/wa" "$MPI_TRAIN" "${RUN[@]}" --data d.tsv --out dd : \
  -np 1 -wdir "$QKV_TMP/wb" "$MPI_TRAIN" "${RUN[@]}" --data d.tsv --out dd
expect_out "MPI rank 1 reads a different --data file than rank 0"
# --batch smaller than the rank count.
expect_status_not_hang "${MPIRUN[@]}" -np 2 "$MPI_TRAIN" "${RUN[@]}" --batch 1 --out small
expect_out "--batch: 1 sequences cannot be shared by 2 MPI ranks"

# Kill rank 1 (SIGKILL) while both train: the run must end, non-zero.
"${MPIRUN[@]}" -np 2 "$MPI_TRAIN" "${RUN[@]}" --steps 1000000 --out killed >killed.out 2>&1 &
launcher=$!
rank_of() {  # the MPI rank in process $1's environment, if any
  local env
  env=$(tr '\0' '\n' < "/proc/$1/environ" 2>/dev/null || true)
  sed -n 's/^OMPI_COMM_WORLD_RANK=//p' <<< "$env"
}
victim=""
for _ in $(seq 1 200); do  # up to 20 s for the ranks to start training
  if grep -q "loss" killed.out 2>/dev/null; then
    for c in $(pgrep -P "$launcher" || true); do
      for p in $(pgrep -P "$c" || true); do
        [ "$(rank_of "$p")" = 1 ] && victim=$p
      done
    done
  fi
  [ -n "$victim" ] && break
  sleep 0.1
done
[ -n "$victim" ] || { kill "$launcher" 2>/dev/null; cat killed.out; fail "could not find rank 1's process"; }
kill -KILL "$victim"
rc=0
wait "$launcher" || rc=$?
[ $rc -ne 124 ] || { cat killed.out; fail "the run hung after rank 1 was killed"; }
[ $rc -ne 0 ] || { cat killed.out; fail "the run exited 0 after rank 1 was killed"; }
grep -q "rank 1 .*exited on signal 9" killed.out || { cat killed.out; fail "no message names the killed rank"; }
echo "killed rank 1: mpirun exited $rc"
