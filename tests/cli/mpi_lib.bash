# Helpers for the MPI program tests tests/cli/mpi_*.sh (sourced; not a test).
# They run the trainer built with MPI=1 ($QKV_MPI_BIN/train, which make test
# builds when OpenMPI is installed) under mpirun on this machine's loopback.
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
# (a folder that does not exist leaves "/train", which the test below skips on; under
# set -e a failing substitution would end the script before it)
MPI_TRAIN="$(cd "${QKV_MPI_BIN:-$QKV_BIN/../rel-mpi-f32}" 2>/dev/null && pwd || true)/train"
if ! command -v mpirun >/dev/null || [ ! -x "$MPI_TRAIN" ]; then
  echo "skipped: no mpirun or no MPI trainer ($MPI_TRAIN); .ci/deps installs OpenMPI, make test builds it"
  exit 0
fi
# Root needs --allow-run-as-root; --oversubscribe lets 2 ranks share fewer
# cores. OpenMPI's default transports (shared memory between local ranks)
# work here; every run is bounded by timeout so a hang fails the test.
MPIRUN=(timeout 60 mpirun --allow-run-as-root --oversubscribe)
export OMPI_MCA_rmaps_base_oversubscribe=1
# Leak reports from OpenMPI's own allocations are not ours (make test SANITIZE=1).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}"

# A run that must show data-parallel effects quickly: 20 steps, no early stop,
# a batch of 16 sequences of varied length shared by the ranks.
RUN=("${TINY[@]}" --no-early-stop --log-every 5)

# header_len FILE: the length of a safetensors file's JSON header.
header_len() { od -An -t u8 -N8 "$1" | tr -d ' '; }
# tensors FILE: "name begin end" (data offsets) of every tensor, from the header.
tensors() {
  local hlen
  hlen=$(header_len "$1")
  head -c $((8 + hlen)) "$1" | tail -c "$hlen" |
    grep -o '"[^"]*":{"dtype":"F32","shape":\[[0-9,]*\],"data_offsets":\[[0-9]*,[0-9]*\]}' |
    sed -E 's/^"([^"]*)".*"data_offsets":\[([0-9]+),([0-9]+)\].*/\1 \2 \3/'
}
# weights FILE: the numbers of the model's parameters, one per line, tensor by
# tensor in name order, except the attention key biases (*.w_k.bias): their
# gradient is zero in exact arithmetic (adding b_k to every key adds the same
# q.b_k to all of a query's scores, which softmax ignores), so what float32
# computes for it is rounding noise, and Adam's first updates, lr * g/|g|,
# turn noise of either sign into a full +-lr step. Any change of summation
# order (2 ranks, or 1 vs 2 threads) moves them by up to ~lr per step.
weights() {
  local hlen name b e
  hlen=$(header_len "$1")
  tensors "$1" | grep '^model\.' | grep -v '\.w_k\.bias ' | sort |
    while read -r name b e; do
      od -An -v -f -j $((8 + hlen + b)) -N $((e - b)) "$1"
    done | tr -s ' ' '\n' | sed '/^$/d'
}
# max_gap A B: the largest |a - b| over the two checkpoints' weights.
max_gap() {
  paste <(weights "$1") <(weights "$2") |
    awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++ }
         END { if (bad || n < 100) { print "mismatch"; exit } printf "%.3g\n", m }'
}
# expect_close A B TOL WHAT: the checkpoints' weights agree to TOL.
expect_close() {
  local gap
  gap=$(max_gap "$1" "$2")
  [ "$gap" != mismatch ] || fail "$4: the checkpoints do not hold the same tensors"
  awk -v g="$gap" -v t="$3" 'BEGIN { exit !(g <= t) }' || fail "$4: max |difference| $gap > $3"
  echo "$4: max |difference| of the weights $gap (tolerance $3)"
}
# data_equal A B: the data sections are bit for bit the same.
data_equal() {
  cmp -s <(tail -c +$((9 + $(header_len "$1"))) "$1") <(tail -c +$((9 + $(header_len "$2"))) "$2")
}
