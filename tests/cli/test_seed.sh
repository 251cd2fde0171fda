# QKV_TEST_SEED (tests/test_seed.h): a number offsets every test's seeds and
# the run says so; anything else stops the test binary with exit 2, naming
# the variable, before a test runs.
source "$(dirname "$0")/lib.bash"
TESTS="$QKV_BIN/qkv_tests"
ONE='-tc=dropout: the same generator seed gives the same mask*'  # -tc splits at commas
QKV_TEST_SEED=7 expect_ok "$TESTS" "$ONE"
expect_out "QKV_TEST_SEED=7: every test's seeds are offset by it"
expect_out "test cases: 1 | 1 passed | 0 failed"
QKV_TEST_SEED=seven expect_fail "$TESTS" "$ONE"
expect_out "QKV_TEST_SEED=seven: expected a decimal integer"
rc=0
QKV_TEST_SEED=seven "$TESTS" "$ONE" >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "QKV_TEST_SEED=seven: exit status $rc (want 2)"
echo "QKV_TEST_SEED offsets the seeds and a bad value is refused"
