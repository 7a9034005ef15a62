//===--- DeviceIndexUncheckedCheck.cpp - torch-tidy -----------------------===//
//
// The requirement: a hard-coded CUDA ordinal N runs only where a
// device_count() comparison has proven N+1 devices. The count is a path fact
// of the engine, refined on branches and joined over the callers (one
// caller's proof is enough: precision first). An ordinal at class or
// namespace scope has no path: it is weighed against the largest count any
// comparison of the TU proves.
//
//===----------------------------------------------------------------------===//

#include "DeviceIndexUncheckedCheck.h"
#include "api/TorchMatchers.h"
#include "api/Devices.h"

namespace clang::tidy::torch {

namespace {

enum : unsigned { ClassScopeFlag = 1u << 31 };

class OrdinalChecked : public Requirement {
public:
  llvm::StringRef name() const override { return "ordinal-checked"; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    if (S.getBeginLoc().isInvalid() ||
        M.context().getSourceManager().isInSystemHeader(S.getBeginLoc()))
      return false;
    bool IsString = false;
    const Expr *Arg = cudaOrdinalArgument(S, M.context(), IsString);
    if (!Arg)
      return false;
    // The ordinal's value says where it is written: here, or in a constant,
    // a local, a ternary's arm, a caller's argument.
    ValueFacts F = M.evaluate(Arg, St);
    if (F.OrdinalSpelled.isInvalid() || F.SpelledOrdinal <= 0)
      return false;
    Out.Operands.push_back({F, "", Arg});
    Out.Flags = unsigned(F.SpelledOrdinal);
    // A member's default initialiser or a global's: no path of its own.
    if (M.isOutsidePaths(*Arg))
      Out.Flags |= ClassScopeFlag;
    return true;
  }

  Verdict judge(const RequirementMatch &M, const SiteContext &C) const override {
    int64_t Ordinal = M.Flags & ~ClassScopeFlag;
    return Ordinal < C.Path.CountAtLeast ? Verdict::Holds : Verdict::Violated;
  }
};

const OrdinalChecked Instance;
const RequirementRegistration Registered(Instance);

} // namespace

DeviceIndexUncheckedCheck::DeviceIndexUncheckedCheck(StringRef Name,
                                                     ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      ExtraDeviceCountFunctions(Options.get("ExtraDeviceCountFunctions", "")) {
  Kind = &Instance;
}

void DeviceIndexUncheckedCheck::storeOptions(
    ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraDeviceCountFunctions", ExtraDeviceCountFunctions);
}

void DeviceIndexUncheckedCheck::report(const Violation &V,
                                       ProgramModel &Program) {
  int64_t Ordinal = V.Match.Flags & ~ClassScopeFlag;
  int64_t Proven = V.Context.Path.CountAtLeast;
  const Expr *Proof = V.Context.Path.CountProof;
  // A comparison with a constant counts in its whole function (it was
  // compared, if not on this path); at class or namespace scope, anywhere in
  // the TU.
  auto [Count, Comparison] = V.Match.Flags & ClassScopeFlag
                                 ? Program.largestCountProven()
                                 : V.Analysis->largestCountProven();
  if (Count > Proven) {
    Proven = Count;
    Proof = Comparison;
  }
  if (Ordinal < Proven)
    return;
  // At the literal, where the ordinal is written.
  SourceLocation Loc = V.Match.Operands[0].Facts.OrdinalSpelled;
  if (!firstAt(Loc))
    return;
  // Proving one device is proving CUDA is there, not checking an ordinal.
  if (!Proof || Proven <= 1) {
    diag(Loc, "hard-coded CUDA device ordinal %0 is never checked "
              "against torch::cuda::device_count(); "
              "CUDA_VISIBLE_DEVICES renumbers the devices a process "
              "sees, so ordinal %0 may not exist")
        << static_cast<int>(Ordinal);
    return;
  }
  diag(Loc, "hard-coded CUDA device ordinal %0 is above what the "
            "torch::cuda::device_count() check proves (%1 "
            "%plural{1:device|:devices}1); CUDA_VISIBLE_DEVICES renumbers the "
            "devices a process sees, so ordinal %0 may not exist")
      << static_cast<int>(Ordinal) << static_cast<int>(Proven);
  diag(Proof->getExprLoc(), "the device count is compared here",
       DiagnosticIDs::Note);
}

} // namespace clang::tidy::torch
