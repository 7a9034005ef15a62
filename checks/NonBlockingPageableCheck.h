//===--- NonBlockingPageableCheck.h - torch-tidy ----------------*- C++ -*-===//

#ifndef TORCH_TIDY_NONBLOCKINGPAGEABLECHECK_H
#define TORCH_TIDY_NONBLOCKINGPAGEABLECHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

struct InstantiatedRequirement;

/// Flags a host-to-device copy with non_blocking set whose source the flow
/// analysis proves to be in pageable host memory: CUDA copies it
/// synchronously, so the flag buys no overlap. Also flags the call of a
/// helper that makes such a copy of the pageable tensor it is given.
///
/// For the user-facing documentation see:
/// docs/checks/torch-non-blocking-pageable.md
class NonBlockingPageableCheck : public ModelCheck {
public:
  NonBlockingPageableCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void checkBody(const FunctionDecl &Function,
                 const TensorFlowAnalysis &Analysis,
                 ProgramModel &Program) override;
  /// Reports a copy of \p From to \p To at \p Loc; \p Source is the
  /// expression that names the source in this function.
  void report(SourceLocation Loc, const Expr *Source, const ValueFacts &From,
              const Sourced<DeviceValue> &To, const ASTContext &Ctx);
  void checkRequirement(const CallExpr &Call, const InstantiatedRequirement &R,
                        ProgramModel &Program);

  const StringRef RawExtraPinnedAllocators;
  const StringRef RawExtraFactories;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_NONBLOCKINGPAGEABLECHECK_H
