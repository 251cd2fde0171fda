#include "models/model.h"

#include <string>

#include "core/error.h"

namespace qkv::nn {

TeacherForced Model::forward_text(const data::LMBatch&) {
  throw Error(std::string(kind()) +
              " model: reads (source, target) pairs, not plain text (a language model, gpt, does)");
}

}  // namespace qkv::nn
