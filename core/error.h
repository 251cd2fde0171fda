// qkv::Error: every failure the user can cause is reported with this type,
// with a message that names the op and the shapes involved, e.g.
//   matmul: (2,3) x (4,5): inner dims 3 != 4
#pragma once
#include <stdexcept>
#include <string>

namespace qkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace qkv
