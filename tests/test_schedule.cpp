// Learning-rate schedules: values at known steps, and bad arguments.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/qkv_autograd.h"
#include "core/error.h"
#include "optim/schedule.h"
#include "optim/sgd.h"

using namespace qkv;
using namespace qkv::optim;

TEST_CASE("Noam schedule: values at step 1, warmup and 4 * warmup, peak at step = warmup") {
  NoamSchedule s(/*d_model=*/512, /*warmup=*/4000);
  // step 1:    512^-0.5 * 1 * 4000^-1.5 = 0.04419417 * 3.9528471e-6 = 1.7469281e-7
  CHECK(s.lr(1) == doctest::Approx(1.7469281e-7).epsilon(1e-6));
  // warmup:    512^-0.5 * 4000^-0.5 = (2048000)^-0.5 = 6.9877124e-4
  CHECK(s.lr(4000) == doctest::Approx(6.9877124e-4).epsilon(1e-6));
  // 4 warmup:  512^-0.5 * 16000^-0.5 = (8192000)^-0.5 = 3.4938562e-4, half the peak
  CHECK(s.lr(16000) == doctest::Approx(3.4938562e-4).epsilon(1e-6));
  // Linear rise: step 2000 is half the peak.
  CHECK(s.lr(2000) == doctest::Approx(s.lr(4000) / 2).epsilon(1e-6));
  // The maximum over steps is at step = warmup.
  CHECK(s.lr(3999) < s.lr(4000));
  CHECK(s.lr(4001) < s.lr(4000));
  // factor scales the whole curve.
  NoamSchedule s2(512, 4000, /*factor=*/2);
  CHECK(s2.lr(123) == doctest::Approx(2 * s.lr(123)).epsilon(1e-6));
  CHECK(s2.lr(40000) == doctest::Approx(2 * s.lr(40000)).epsilon(1e-6));
}

TEST_CASE(
    "warmup-cosine schedule: linear warmup, cosine midpoint and endpoints, min_lr after the end") {
  WarmupCosineSchedule s(/*peak_lr=*/1e-3, /*warmup=*/10, /*total_steps=*/110, /*min_lr=*/1e-5);
  CHECK(s.lr(1) == doctest::Approx(1e-4).epsilon(1e-6));   // 1e-3 * 1 / 10
  CHECK(s.lr(5) == doctest::Approx(5e-4).epsilon(1e-6));   // 1e-3 * 5 / 10
  CHECK(s.lr(10) == doctest::Approx(1e-3).epsilon(1e-6));  // the peak
  // Midpoint of the cosine, step 60 (progress 1/2): (peak + min) / 2 = 5.05e-4
  CHECK(s.lr(60) == doctest::Approx(5.05e-4).epsilon(1e-6));
  // Quarter point, step 35: min + (peak - min) (1 + cos(pi/4)) / 2 = 1e-5 + 9.9e-4 * 0.8535534
  CHECK(s.lr(35) == doctest::Approx(1e-5 + 9.9e-4 * 0.85355339).epsilon(1e-6));
  CHECK(s.lr(110) == doctest::Approx(1e-5).epsilon(1e-6));  // the end
  CHECK(s.lr(111) == doctest::Approx(1e-5).epsilon(1e-6));
  CHECK(s.lr(1000000) == doctest::Approx(1e-5).epsilon(1e-6));
  // Strictly decreasing after the peak.
  CHECK(s.lr(11) < s.lr(10));
  CHECK(s.lr(109) > s.lr(110));

  // No warmup: the cosine starts at the peak on step 1... (progress 1/100 there)
  WarmupCosineSchedule nw(1.0, 0, 100);
  CHECK(nw.lr(1) == doctest::Approx(0.5 * (1 + std::cos(M_PI / 100))).epsilon(1e-6));
  CHECK(nw.lr(50) == doctest::Approx(0.5).epsilon(1e-6));
  CHECK(nw.lr(100) == doctest::Approx(0).epsilon(1e-6));
  // total == warmup: warmup, then min_lr.
  WarmupCosineSchedule flat(1.0, 4, 4, 0.25);
  CHECK(flat.lr(4) == doctest::Approx(1));
  CHECK(flat.lr(5) == doctest::Approx(0.25));
}

TEST_CASE("constant schedule, with and without linear warmup") {
  ConstantSchedule c(0.01);
  CHECK(c.lr(1) == doctest::Approx(0.01));
  CHECK(c.lr(1000000) == doctest::Approx(0.01));
  ConstantSchedule w(0.01, /*warmup=*/4);
  CHECK(w.lr(1) == doctest::Approx(0.0025));  // 0.01 * 1 / 4
  CHECK(w.lr(3) == doctest::Approx(0.0075));
  CHECK(w.lr(4) == doctest::Approx(0.01));
  CHECK(w.lr(100) == doctest::Approx(0.01));
}

TEST_CASE("schedules reject bad arguments and steps before 1") {
  CHECK_THROWS_WITH_AS(NoamSchedule(512, 0),
                       doctest::Contains("NoamSchedule: warmup must be > 0, got 0"), Error);
  CHECK_THROWS_WITH_AS(NoamSchedule(0, 10), doctest::Contains("d_model must be > 0"), Error);
  CHECK_THROWS_WITH_AS(NoamSchedule(512, 10, -1), doctest::Contains("factor"), Error);
  CHECK_THROWS_WITH_AS(
      WarmupCosineSchedule(1e-3, 100, 50),
      doctest::Contains("total_steps must be >= max(warmup, 1), got total_steps 50 "
                        "with warmup 100"),
      Error);
  CHECK_THROWS_WITH_AS(WarmupCosineSchedule(1e-3, 0, 0), doctest::Contains("total_steps"), Error);
  CHECK_THROWS_WITH_AS(WarmupCosineSchedule(1e-3, 10, 100, 1e-2), doctest::Contains("min_lr"),
                       Error);
  CHECK_THROWS_WITH_AS(WarmupCosineSchedule(1e-3, -1, 100),
                       doctest::Contains("warmup must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(ConstantSchedule(-1), doctest::Contains("ConstantSchedule: lr"), Error);
  CHECK_THROWS_WITH_AS(ConstantSchedule(1, -2), doctest::Contains("warmup"), Error);
  const NoamSchedule s(512, 10);
  CHECK_THROWS_WITH_AS(s.lr(0), doctest::Contains("NoamSchedule.lr: step 0 < 1"), Error);
  CHECK_THROWS_WITH_AS(ConstantSchedule(1).lr(-3), doctest::Contains("step -3 < 1"), Error);
  CHECK_THROWS_WITH_AS(WarmupCosineSchedule(1, 1, 2).lr(0), doctest::Contains("step 0 < 1"), Error);
}

TEST_CASE("a schedule drives the optimizer: each step uses lr(step_count() + 1)") {
  Var p(Tensor::from_vector({0}), true);
  SGD opt({p}, /*lr=*/0);
  ConstantSchedule sched(1.0, /*warmup=*/4);
  double want = 0;
  for (int step = 1; step <= 6; ++step) {
    p.impl()->grad = Tensor::from_vector({-1});  // each step moves p by +lr
    opt.lr = sched.lr(opt.step_count() + 1);
    opt.step();
    want += std::min(1.0, step / 4.0);  // 0.25 + 0.5 + 0.75 + 1 + 1 + 1
  }
  CHECK(p.item() == doctest::Approx(want).epsilon(1e-6));
  CHECK(want == doctest::Approx(4.5));
}
