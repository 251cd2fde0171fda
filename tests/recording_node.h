// A test op that passes the sum of its inputs through and writes its label
// into `log` when the engine calls its backward: it shows the order
// run_backward really visits the nodes in (tests/test_step_through.cpp,
// tests/test_explorer.cpp).
#pragma once
#include <string>
#include <vector>

#include "autograd/node.h"
#include "core/elementwise.h"

namespace qkv::testing {

struct RecordingNode : Node {
  std::string label;
  std::vector<std::string>* log = nullptr;
  const char* name() const override { return label.c_str(); }
  TensorList backward(const Tensor& g) override {
    log->push_back(label);
    return TensorList(inputs.size(), g);  // d(sum)/d(each input) = 1
  }
};

// The sum of `in`, made by a RecordingNode labelled `label`.
inline Var recorded(const std::string& label, std::vector<Var> in, std::vector<std::string>& log) {
  auto node = make_node<RecordingNode>();
  node->label = label;
  node->log = &log;
  Tensor out = in[0].data().clone();
  for (size_t i = 1; i < in.size(); ++i) out = add(out, in[i].data());
  VarList inputs(in.begin(), in.end());
  return make_result(out, node, inputs);
}

}  // namespace qkv::testing
