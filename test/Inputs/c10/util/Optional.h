#pragma once
// The real header holds only optional; ArrayRef and Scalar come along because
// the other mocks expect them here.
#include <c10/core/Scalar.h>
#include <c10/util/ArrayRef.h>
#include <optional>
namespace c10 {
// LibTorch 2.x: c10::optional is std::optional (1.13 had a class of its own:
// test/api/Inputs/libtorch-1.13/c10/util/Optional.h).
using std::make_optional;
using std::nullopt;
using std::nullopt_t;
using std::optional;
} // namespace c10
