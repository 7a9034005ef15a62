//===--- NonBlockingD2HRaceCheck.h - torch-tidy -----------------*- C++ -*-===//

#ifndef TORCH_TIDY_NONBLOCKINGD2HRACECHECK_H
#define TORCH_TIDY_NONBLOCKINGD2HRACECHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags the first host read of the result of a non-blocking device-to-host
/// copy that no synchronisation has completed on every path to the read.
///
/// For the user-facing documentation see:
/// docs/checks/torch-non-blocking-d2h-race.md
class NonBlockingD2HRaceCheck : public ModelCheck {
public:
  NonBlockingD2HRaceCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  const StringRef RawExtraSyncFunctions;
  /// A copy is reported at its first read in each function; later reads
  /// race the same copy.
  llvm::DenseSet<std::pair<SourceLocation, const Decl *>> CopiesReported;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_NONBLOCKINGD2HRACECHECK_H
