# run_all: alone (it installs the browser test's npm packages that train_explain.sh uses, and bounds its run in seconds)
# The explorer page in a real browser: Debian's headless chromium, driven by
# puppeteer-core from npm (tests/browser/, which downloads no browser), runs
# tests/browser/explorer_test.mjs on the page step_through --html writes: no
# console error, a clicked node shows the engine's numbers, the arrow key
# steps the backward pass in the engine's order, every finite difference
# passes. The npm packages are installed once into $QKV_BIN/browser-test.
source "$(dirname "$0")/lib.bash"
command -v node >/dev/null || fail "node is not installed (make test installs nodejs through .ci/deps)"
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || fail "chromium is not installed (make test installs it through .ci/deps)"
deps="$QKV_BIN/browser-test"
mkdir -p "$deps"
if ! cmp -s "$QKV_SRC/tests/browser/package-lock.json" "$deps/package-lock.json" ||
   [ ! -d "$deps/node_modules/puppeteer-core" ]; then
  cp "$QKV_SRC/tests/browser/package.json" "$QKV_SRC/tests/browser/package-lock.json" "$deps/"
  (cd "$deps" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
    fail "npm ci of tests/browser/package.json failed"
fi
cp "$QKV_SRC/tests/browser/explorer_test.mjs" "$deps/"
cd "$QKV_TMP"
expect_ok "$QKV_BIN/step_through" --html page.html
start=$(date +%s)
timeout 120 node "$deps/explorer_test.mjs" page.html ${QKV_EXPLORER_SCREENSHOT:+"$QKV_EXPLORER_SCREENSHOT"}
secs=$(( $(date +%s) - start ))
[ "$secs" -lt 60 ] || fail "the browser test took $secs s, not under 60 s"
