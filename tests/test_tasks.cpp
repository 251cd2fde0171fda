// The toy task generators and the batching used by the training program.
#include <doctest/doctest.h>

#include <algorithm>

#include "data/tasks.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::data;

using qkv::testing::test_generator;

TEST_CASE("tasks: reverse of reverse is the identity; copy is the identity; sort sorts") {
  Generator g = test_generator();
  TaskData d({Task::Reverse, 10, 3, 10}, 10, g);
  for (int i = 0; i < 200; ++i) {
    Seq s = d.sample_train(g);
    CHECK(apply_task(Task::Reverse, apply_task(Task::Reverse, s)) == s);
    CHECK(apply_task(Task::Copy, s) == s);
    Seq r = apply_task(Task::Reverse, s);
    CHECK(r.front() == s.back());
    Seq sorted = apply_task(Task::Sort, s);
    CHECK(std::is_sorted(sorted.begin(), sorted.end()));
  }
}

TEST_CASE("tasks: the held-out set is distinct and training never samples from it") {
  Generator g = test_generator();
  // Lengths 3..4 over 4 symbols: 64 + 256 = 320 sequences, 100 held out, so a
  // training sampler that ignored the held-out set would hit it within a few draws.
  TaskData d({Task::Copy, 4, 3, 4}, 100, g);
  std::set<Seq> held(d.heldout().begin(), d.heldout().end());
  CHECK(held.size() == 100);
  for (int i = 0; i < 20000; ++i) {
    Seq s = d.sample_train(g);
    REQUIRE(s.size() >= 3);
    REQUIRE(s.size() <= 4);
    CHECK_FALSE(held.count(s));
  }
}

TEST_CASE("tasks: symbols and lengths stay in range and both ends of the length range occur") {
  Generator g = test_generator();
  TaskData d({Task::Reverse, 10, 3, 10}, 0, g);
  std::set<size_t> lengths;
  for (int i = 0; i < 5000; ++i) {
    Seq s = d.sample_train(g);
    lengths.insert(s.size());
    for (int64_t t : s) {
      CHECK(t >= kFirstSymbol);
      CHECK(t < kFirstSymbol + 10);
    }
  }
  CHECK(*lengths.begin() == 3);
  CHECK(*lengths.rbegin() == 10);
  CHECK(lengths.size() == 8);
}

TEST_CASE("tasks: collate pads sources, starts targets with <bos> and ends answers with <eos>") {
  Batch b = collate(Task::Reverse, {{3, 4, 5}, {6, 7}});
  CHECK(b.src.batch == 2);
  CHECK(b.src.len == 3);
  CHECK(b.src.ids == std::vector<int64_t>{3, 4, 5, 6, 7, kPad});
  CHECK(b.src.lengths == std::vector<int64_t>{3, 2});
  CHECK(b.tgt_in.len == 4);
  CHECK(b.tgt_in.ids == std::vector<int64_t>{kBos, 5, 4, 3, kBos, 7, 6, kPad});
  CHECK(b.tgt_in.lengths == std::vector<int64_t>{4, 3});
  CHECK(b.tgt_out == std::vector<int64_t>{5, 4, 3, kEos, 7, 6, kEos, kPad});
  CHECK(b.target_tokens == 7);
}

TEST_CASE("tasks: bad configurations are clear errors") {
  Generator g = test_generator();
  CHECK_THROWS_WITH_AS(TaskData({Task::Copy, 10, 5, 3}, 10, g), doctest::Contains("min_len"),
                       Error);
  CHECK_THROWS_WITH_AS(TaskData({Task::Copy, 2, 1, 2}, 5, g), doctest::Contains("more than half"),
                       Error);
  CHECK_THROWS_WITH_AS(parse_task("rotate"), doctest::Contains("unknown task 'rotate'"), Error);
}
