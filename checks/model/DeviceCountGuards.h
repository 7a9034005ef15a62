//===--- DeviceCountGuards.h - torch-tidy -----------------------*- C++ -*-===//
//
// Which hard-coded CUDA ordinals a program checks against the device count:
// the model behind torch-device-index-unchecked. A comparison with
// `torch::cuda::device_count()` (or a variable holding it) proves ordinals:
//  - against a constant, `count > 2` or an early `if (count < 3) return;`,
//    the ordinals up to what it proves, in its whole function;
//  - against a value the program picks, `i < count`, every ordinal, but only
//    in the statement it controls (the `if`, the loop, the `?:`), unless it
//    leads to an early exit; an ordinal written after the loop that counts
//    the devices is not checked by it.
// A comparison in a caller counts at the call (up to four levels of callers,
// on the ProgramModel's call sites): one checked path is enough to stay
// silent.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_DEVICECOUNTGUARDS_H
#define TORCH_TIDY_ANALYSIS_DEVICECOUNTGUARDS_H

#include "clang/AST/Expr.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"
#include <limits>
#include <memory>
#include <optional>
#include <vector>

namespace clang::tidy::torch {

class ProgramModel;

class DeviceCountGuards {
public:
  static constexpr int64_t EveryOrdinal = std::numeric_limits<int64_t>::max();

  /// What the comparisons that reach a site prove.
  struct Proof {
    /// Every ordinal up to this one is known to exist; -1 when none is.
    int64_t GuardedUpTo = -1;
    /// The comparison that proves the most, for the note.
    const Expr *Comparison = nullptr;
  };

  /// \p CountFunctions: qualified names (a leading `::` anchors them) of the
  /// functions that return the number of devices.
  DeviceCountGuards(ProgramModel &Program,
                    std::vector<std::string> CountFunctions);
  ~DeviceCountGuards();

  /// What protects an ordinal written at \p Site.
  Proof at(const Expr &Site);

  struct FunctionGuards;

private:
  const FunctionGuards &guardsIn(const FunctionDecl &Function);
  Proof within(const FunctionDecl &Function, const Expr &Site);

  ProgramModel &Program;
  std::vector<std::string> CountFunctions;
  llvm::DenseMap<const FunctionDecl *, std::unique_ptr<FunctionGuards>> Cache;
  std::optional<Proof> TranslationUnit;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_ANALYSIS_DEVICECOUNTGUARDS_H
