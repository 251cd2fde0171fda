#include "nn/tokens.h"

#include <string>

#include "core/error.h"

namespace qkv::nn {

std::vector<int64_t> Tokens::full_lengths() const {
  return lengths.empty() ? std::vector<int64_t>(static_cast<size_t>(batch), len) : lengths;
}

void Tokens::check(const char* op) const {
  if (batch < 0 || len < 0 || static_cast<int64_t>(ids.size()) != batch * len)
    throw Error(std::string(op) + ": " + std::to_string(ids.size()) + " token ids for (B,T) = (" +
                std::to_string(batch) + "," + std::to_string(len) + ")");
  if (!lengths.empty()) {
    if (static_cast<int64_t>(lengths.size()) != batch)
      throw Error(std::string(op) + ": " + std::to_string(lengths.size()) +
                  " lengths for a batch of " + std::to_string(batch));
    for (int64_t b = 0; b < batch; ++b)
      if (lengths[b] < 0 || lengths[b] > len)
        throw Error(std::string(op) + ": length " + std::to_string(lengths[b]) + " of sequence " +
                    std::to_string(b) + " outside [0, " + std::to_string(len) + "]");
  }
}

}  // namespace qkv::nn
