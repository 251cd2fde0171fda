# step_through --dot: part 2's graph in one box per layer with the parameters
# folded into their ops, --dot-params draws them as nodes, and --dot-params
# alone is refused. (Does not need Graphviz: only the DOT text is checked.)
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
expect_fail "$QKV_BIN/step_through" --dot-params
expect_out "--dot-params requires --dot"
expect_ok "$QKV_BIN/step_through" --part 1 --no-fd --dot g.dot
expect_out "Wrote g.dot: part 2's graph of 62 variables,"
expect_out "Each op lists the parameters it reads"
[ "$(grep -c '^ *subgraph "cluster_' g.dot)" = 2 ] || fail "not one box per layer: $(grep subgraph g.dot)"
grep -qF 'subgraph "cluster_encoder.layers.0" {' g.dot || fail "no encoder.layers.0 box"
grep -qF 'subgraph "cluster_decoder.layers.0" {' g.dot || fail "no decoder.layers.0 box"
[ "$(grep -c '\[label=' g.dot)" = 16 ] || fail "expected 16 op nodes, got $(grep -c '\[label=' g.dot)"
grep -qF 'cross_attn: multi_head_attention\n(1,4,8)' g.dot || fail "cross_attn's op is not named by its module"
grep -qF 'w_q: weight (8,8), bias (8)' g.dot || fail "attention's parameters are not folded into its label"
[ "$(tr -cd '{' < g.dot | wc -c)" = "$(tr -cd '}' < g.dot | wc -c)" ] || fail "unbalanced braces"
expect_ok "$QKV_BIN/step_through" --part 1 --no-fd --dot p.dot --dot-params
expect_out "Every parameter is a node of its own (--dot-params)."
[ "$(grep -c '\[label=' p.dot)" = 62 ] || fail "--dot-params: expected 62 nodes, got $(grep -c '\[label=' p.dot)"
[ "$(grep -c 'shape=ellipse' p.dot)" = 46 ] || fail "--dot-params: expected 46 parameter nodes"
