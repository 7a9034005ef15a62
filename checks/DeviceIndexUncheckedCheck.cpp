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
#include "clang/AST/ExprCXX.h"
#include <limits>

namespace clang::tidy::torch {

namespace {

enum : unsigned { ClassScopeFlag = 1u << 31 };

/// Strips what the compiler adds around a spelled argument: implicit
/// conversions, temporaries, parentheses, and the `std::string` built from
/// a string literal on its way to `Device(const std::string &)`.
const Expr *spelledArgument(const Expr *E) {
  while (E) {
    const Expr *Next = E->IgnoreImplicit()->IgnoreParens();
    if (const auto *Construct = dyn_cast<CXXConstructExpr>(Next)) {
      const CXXRecordDecl *Class = Construct->getConstructor()->getParent();
      if (Construct->getNumArgs() >= 1 && Class->isInStdNamespace() &&
          (Class->getName() == "basic_string" ||
           Class->getName() == "basic_string_view"))
        Next = Construct->getArg(0);
    } else if (const auto *Cast = dyn_cast<CXXFunctionalCastExpr>(Next)) {
      Next = Cast->getSubExpr();
    }
    if (Next == E)
      return E;
    E = Next;
  }
  return E;
}

bool isCudaDeviceType(const Expr *E, const ASTContext &Ctx) {
  E = spelledArgument(E);
  if (!isDeviceTypeEnum(E->getType()) || E->isValueDependent())
    return false;
  const auto *Enum = E->getType().getCanonicalType()->getAs<EnumType>();
  Expr::EvalResult Value;
  if (!Enum || !E->EvaluateAsInt(Value, Ctx))
    return false;
  for (const EnumConstantDecl *Constant : Enum->getDecl()->enumerators())
    if (Constant->getName() == "CUDA")
      return llvm::APSInt::isSameValue(Constant->getInitVal(),
                                       Value.Val.getInt());
  return false;
}

/// A hard-coded ordinal: `1` in `Device(kCUDA, 1)`, `"cuda:1"`.
const Expr *ordinalLiteral(const Expr *E, int64_t &Ordinal, bool String) {
  E = spelledArgument(E);
  if (!String) {
    const auto *Literal = dyn_cast<IntegerLiteral>(E);
    if (!Literal || Literal->getValue().getActiveBits() > 31)
      return nullptr;
    Ordinal = int64_t(Literal->getValue().getZExtValue());
    return Literal;
  }
  const auto *Literal = dyn_cast<StringLiteral>(E);
  if (!Literal || !Literal->isOrdinary())
    return nullptr;
  llvm::StringRef Text = Literal->getString();
  unsigned Value = 0;
  if (!Text.consume_front("cuda:") || Text.getAsInteger(10, Value) ||
      Value > std::numeric_limits<int16_t>::max())
    return nullptr;
  Ordinal = Value;
  return Literal;
}

/// The ordinal a Device / TensorOptions construction, `.device(...)`,
/// `.device_index(...)` or `device_index(...)` spells.
const Expr *siteOrdinal(const Stmt &S, const ASTContext &Ctx,
                        int64_t &Ordinal) {
  llvm::SmallVector<const Expr *, 2> Args;
  llvm::StringRef Callee;
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(&S)) {
    std::string Class =
        Construct->getConstructor()->getParent()->getQualifiedNameAsString();
    if (Class != "c10::Device" && Class != "c10::TensorOptions")
      return nullptr;
    Args.append(Construct->arg_begin(), Construct->arg_end());
  } else if (const auto *Call = dyn_cast<CallExpr>(&S)) {
    const FunctionDecl *FD = Call->getDirectCallee();
    if (!FD || !FD->getIdentifier())
      return nullptr;
    Callee = FD->getName();
    bool OptionsMethod =
        isa<CXXMethodDecl>(FD) && (Callee == "device" || Callee == "device_index") &&
        cast<CXXMethodDecl>(FD)->getParent()->getQualifiedNameAsString() ==
            "c10::TensorOptions";
    bool FreeIndex = !isa<CXXMethodDecl>(FD) && Callee == "device_index" &&
                     FD->getQualifiedNameAsString() == "c10::device_index";
    if (!OptionsMethod && !FreeIndex)
      return nullptr;
    Args.append(Call->arg_begin(), Call->arg_end());
  } else {
    return nullptr;
  }
  llvm::erase_if(Args, [](const Expr *A) { return isa<CXXDefaultArgExpr>(A); });
  if (Callee == "device_index")
    return Args.size() == 1 ? ordinalLiteral(Args[0], Ordinal, false) : nullptr;
  if (Args.size() == 2)
    return isCudaDeviceType(Args[0], Ctx)
               ? ordinalLiteral(Args[1], Ordinal, false)
               : nullptr;
  if (Args.size() == 1)
    return ordinalLiteral(Args[0], Ordinal, true);
  return nullptr;
}

class OrdinalChecked : public Requirement {
public:
  llvm::StringRef name() const override { return "ordinal-checked"; }

  bool match(const Stmt &S, const FlowModel &M, const State &,
             RequirementMatch &Out) const override {
    if (S.getBeginLoc().isInvalid() ||
        M.context().getSourceManager().isInSystemHeader(S.getBeginLoc()))
      return false;
    int64_t Ordinal = 0;
    const Expr *Literal = siteOrdinal(S, M.context(), Ordinal);
    if (!Literal || Ordinal <= 0)
      return false;
    Out.Operands.push_back({ValueFacts(), "", Literal});
    Out.Flags = unsigned(Ordinal);
    // A member's default initialiser or a global's: no path of its own.
    const FunctionDecl *F = M.function();
    const Stmt *Body = F ? F->getBody() : nullptr;
    const SourceManager &SM = M.context().getSourceManager();
    if (!Body || SM.isBeforeInTranslationUnit(SM.getExpansionLoc(Literal->getBeginLoc()),
                                              SM.getExpansionLoc(Body->getBeginLoc())))
      if (!isa_and_nonnull<CXXConstructorDecl>(F) ||
          !llvm::any_of(cast<CXXConstructorDecl>(F)->inits(),
                        [&](const CXXCtorInitializer *I) {
                          return I->isWritten() && I->getInit() &&
                                 !SM.isBeforeInTranslationUnit(
                                     SM.getExpansionLoc(Literal->getBeginLoc()),
                                     SM.getExpansionLoc(I->getSourceLocation()));
                        }))
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
  SourceLocation Loc = V.Match.Operands[0].Source->getBeginLoc();
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
