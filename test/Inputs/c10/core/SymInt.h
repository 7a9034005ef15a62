#pragma once
// Mock of <c10/core/SymInt.h> and <c10/core/SymIntArrayRef.h>.
#include <c10/util/ArrayRef.h>
#include <cstdint>
namespace c10 {
class SymInt {
public:
  /* implicit */ SymInt(int64_t d);
  SymInt();
  int64_t expect_int() const;
};
using SymIntArrayRef = ArrayRef<SymInt>;
} // namespace c10
