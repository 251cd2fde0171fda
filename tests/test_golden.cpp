// Nothing moves but the shape (issues 34 and 50): model files and training
// checkpoints written by an earlier qkv load with today's code, reproduce the
// logits that qkv computed on a fixed input, and resume for one step to the
// logits its resumed run reached. Two sets, each frozen on purpose, made
// once by tests/golden/make_golden.sh (read its header); never regenerate
// them to make this test pass:
//   tests/fixtures/golden/          2a77ff7's, one per family and
//                                   self-attention kernel (issue 34)
//   tests/fixtures/golden_20e1205/  20e1205's, the last before the training
//                                   program's refactor (issue 50): every
//                                   family, position scheme and token kind,
//                                   mixtures of experts and bf16, with the
//                                   data files they resume on
//
// Tolerance: check_close_to_scale (rtol 1e-5, atol 1e-6 * max|want|), the
// float32 tolerance of the PyTorch parity tests, which holds on AVX2 and
// AVX-512 machines alike: the kernels may sum in another order there, which
// moves a float32 logit of these tiny models (d_model 4 and 8) by ~1e-7
// relative. One optimizer step multiplies no such difference by more than
// the learning rate (a gradient that is exactly zero in exact arithmetic,
// such as a key bias's under softmax, can take an update of either sign,
// but moves no logit: softmax does not see a shift shared by a row's
// scores). The bf16 run's resumed step rounds its products' operands to
// bfloat16 as its run did, on vdpbf16ps or in the AVX2 emulation, which
// round alike and sum in other orders. Checked once on the AVX-512 machine
// that made 20e1205's set, with this test built -march=haswell (bf16
// emulated) and OpenBLAS and libxsmm held to their Haswell kernels
// (OPENBLAS_CORETYPE=Haswell LIBXSMM_TARGET=hsw): every logit of both sets
// stayed within 7.2e-7 of the files'.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "checkpoint/model_file.h"
#include "compare.h"
#include "core/blas.h"
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

// The runs of the set of 20e1205 (tests/golden/make_golden.sh 20e1205), and
// what their checkpoints must say they are.
struct Run20e1205 {
  const char* name;
  const char* family;     // the model file's kind()
  const char* objective;  // the checkpoint's train_config: "" where the family has one way
  const char* positions;
  const char* tokens;  // char also where no text is read (the task's symbols, images)
  bool drops;          // a mixture of experts whose step drops assignments over capacity
  bool bf16;           // trained with --precision bf16 (metadata "matmul_precision")
};
const Run20e1205 k20e1205[] = {
    {"seq2seq_moe", "seq2seq", "", "sinusoidal", "char", false, false},
    {"seq2seq_learned_word", "seq2seq", "", "learned", "word", false, false},
    {"seq2seq_t5_span_char", "seq2seq", "span", "relative", "char", false, false},
    {"seq2seq_bf16", "seq2seq", "", "sinusoidal", "char", false, true},
    {"gpt_learned_char", "gpt", "", "learned", "char", false, false},
    {"gpt_rope_bpe", "gpt", "", "rope", "bpe", false, false},
    {"gpt_relative_word", "gpt", "", "relative", "word", false, false},
    {"gpt_llama_char", "gpt", "", "rope", "char", false, false},
    {"gpt_moe-capacity", "gpt", "", "learned", "char", true, false},
    {"encoder_sinusoidal_word", "encoder", "", "sinusoidal", "word", false, false},
    {"encoder_relative", "encoder", "", "relative", "char", false, false},
    {"bert_mlm_word", "bert", "mlm", "learned", "word", false, false},
    {"bert_classify_bpe", "bert", "classify", "learned", "bpe", false, false},
    {"vit_idx", "vit", "", "learned", "char", false, false},
};

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

// The second set (issue 50): files written by 20e1205, the last commit before
// the training program's refactor, one per family (bert's two objectives; the
// t5 and llama presets), position scheme, token kind, mixture of experts (one
// dropping over capacity) and bf16 products, each trained on the data beside
// them in tests/fixtures/golden_20e1205/ (frozen too: the checkpoints hold
// their hashes). The same checks as 2a77ff7's; the fixed input of each fits
// its model (tokens, "<s> tokens </s>" and a label, or an image and a label).
TEST_CASE(
    "golden files of 20e1205: each family, position scheme, token kind, mixture of experts and "
    "bf16 run's model file and checkpoint reproduce 20e1205's logits, and the checkpoint resumes "
    "one step, on its own data, to 20e1205's") {
  for (const Run20e1205& r : k20e1205) {
    const std::string name = std::string("golden_20e1205/") + r.name;
    CAPTURE(name);
    const TensorFile f = load_fixture(name + ".logits.safetensors");
    const std::vector<data::Pair> pairs = golden_pairs(f);
    REQUIRE(pairs.size() == 3);
    const Tensor& step3 = f.get("logits.step3");
    const Tensor& step4 = f.get("logits.step4");
    REQUIRE(max_abs_diff(step4, step3) > 1e-3);  // the resumed step is real

    auto model = nn::load_model(fixture_path(name + ".model.safetensors"));
    CHECK(std::string(model->kind()) == r.family);
    check_close_to_scale(eval_logits(*model, pairs), step3, name + ".model logits");

    const std::string ckpt = fixture_path(name + ".ckpt.safetensors");
    check_close_to_scale(eval_logits(*nn::load_model(ckpt), pairs), step3, name + ".ckpt logits");

    // Resumed as `train --load ckpt --steps 4` resumed it, from the run's data
    // files as committed beside the checkpoint (named relative to that
    // folder; the trainer checks their hashes), and with the run's products:
    // --precision is the process's, recorded in the file but not restored.
    train::Trainer t = train::Trainer::resume(ckpt, [](train::TrainConfig& c, bool) {
      c.steps = 4;
      for (std::string* file : {&c.data, &c.valid})
        if (!file->empty()) *file = fixture_path("golden_20e1205/" + *file);
    });
    CHECK(t.cfg.model == r.family);
    if (*r.objective) CHECK(t.cfg.objective == r.objective);
    CHECK(t.cfg.positions == r.positions);
    CHECK(t.cfg.tokens == r.tokens);
    const TensorFile file = read_safetensors(ckpt);
    const auto precision = file.metadata.find("matmul_precision");
    CHECK((precision != file.metadata.end() && precision->second == "bf16") == r.bf16);
    REQUIRE(t.step_count() == 3);
    {
      MatmulPrecisionScope products(r.bf16 ? MatmulPrecision::bf16 : MatmulPrecision::fp32);
      t.step();
    }
    CHECK(t.step_count() == 4);
    CHECK((t.experts.dropped > 0) == r.drops);
    check_close_to_scale(eval_logits(t.model(), pairs), step4, name + " resumed logits");
  }
}
