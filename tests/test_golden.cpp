// Nothing moves but the shape (issue 34): model files and training
// checkpoints written by qkv at 2a77ff7, one per family and self-attention
// kernel, load with today's code, reproduce the logits 2a77ff7 computed on a
// fixed input, and resume for one step to the logits 2a77ff7's resumed run
// reached. The files in tests/fixtures/golden/ are frozen on purpose: they
// are 2a77ff7's record, made once by tests/golden/make_golden.sh (read its
// header); never regenerate them to make this test pass.
//
// Tolerance: check_close_to_scale (rtol 1e-5, atol 1e-6 * max|want|), the
// float32 tolerance of the PyTorch parity tests, which holds on AVX2 and
// AVX-512 machines alike: the kernels may sum in another order there, which
// moves a float32 logit of these tiny models (d_model 4) by ~1e-7 relative.
// One optimizer step multiplies no such difference by more than the learning
// rate (a gradient that is exactly zero in exact arithmetic, such as a key
// bias's under softmax, can take an update of either sign, but moves no
// logit: softmax does not see a shift shared by a row's scores).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "checkpoint/model_file.h"
#include "compare.h"
#include "fixture.h"
#include "trainer/trainer.h"

using namespace qkv;
using qkv::testing::check_close_to_scale;

namespace {

const char* const kFamilies[] = {"seq2seq", "gpt", "encoder"};
const char* const kKernels[] = {"standard", "memory-efficient", "sparse", "linear"};

// The fixed input the logits file holds: pairs "input.src.<i>", "input.tgt.<i>".
std::vector<data::Pair> golden_pairs(const TensorFile& f) {
  std::vector<data::Pair> pairs;
  for (int i = 0; f.has("input.src." + std::to_string(i)); ++i) {
    data::Pair p;
    for (real v : f.get("input.src." + std::to_string(i)).to_vector()) p.src.push_back(int64_t(v));
    for (real v : f.get("input.tgt." + std::to_string(i)).to_vector()) p.tgt.push_back(int64_t(v));
    pairs.push_back(p);
  }
  return pairs;
}

Tensor eval_logits(nn::Model& m, const std::vector<data::Pair>& pairs) {
  m.eval();
  NoGradGuard no_grad;
  return m.forward_pairs(pairs).logits.data().clone();
}

}  // namespace

TEST_CASE(
    "golden files of 2a77ff7: each family and attention kernel's model file and checkpoint "
    "reproduce 2a77ff7's logits, and the checkpoint resumes one step to 2a77ff7's") {
  for (const char* family : kFamilies)
    for (const char* kernel : kKernels) {
      const std::string name = std::string("golden/") + family + "_" + kernel;
      CAPTURE(name);
      const TensorFile f = load_fixture(name + ".logits.safetensors");
      const std::vector<data::Pair> pairs = golden_pairs(f);
      REQUIRE(pairs.size() == 3);
      const Tensor& step3 = f.get("logits.step3");
      const Tensor& step4 = f.get("logits.step4");
      // The step taken by 2a77ff7 moved the logits well past the tolerance,
      // so reproducing step4 proves the resumed step, not a no-op.
      REQUIRE(max_abs_diff(step4, step3) > 1e-3);

      // The model file (nn::save_model): its family and kernel, and its logits.
      auto model = nn::load_model(fixture_path(name + ".model.safetensors"));
      CHECK(std::string(model->kind()) == family);
      check_close_to_scale(eval_logits(*model, pairs), step3, name + ".model logits");

      // The training checkpoint read as a model file.
      const std::string ckpt = fixture_path(name + ".ckpt.safetensors");
      check_close_to_scale(eval_logits(*nn::load_model(ckpt), pairs), step3, name + ".ckpt logits");

      // Resumed as `train --load ckpt --steps 4` resumes it: one step on the
      // restored data stream, dropout stream and optimizer state.
      train::Trainer t =
          train::Trainer::resume(ckpt, [](train::TrainConfig& c, bool) { c.steps = 4; });
      CHECK(t.cfg.attention == kernel);
      REQUIRE(t.step_count() == 3);
      t.step();
      CHECK(t.step_count() == 4);
      check_close_to_scale(eval_logits(t.model(), pairs), step4, name + " resumed logits");
    }
}
