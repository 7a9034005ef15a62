//===--- DeviceIndexUncheckedCheck.cpp - torch-tidy -----------------------===//

#include "DeviceIndexUncheckedCheck.h"
#include "model/DeviceCountGuards.h"
#include "model/ProgramModel.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "api/TorchMatchers.h"
#include "model/UserCodeParents.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include <limits>

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

namespace {

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

/// A hard-coded ordinal and where it is spelt.
struct LiteralOrdinal {
  int64_t Value = -1;
  SourceLocation Loc;
};

std::optional<LiteralOrdinal> integerOrdinal(const Expr *E) {
  const auto *Literal = dyn_cast<IntegerLiteral>(spelledArgument(E));
  if (!Literal || Literal->getValue().getActiveBits() > 31)
    return std::nullopt;
  return LiteralOrdinal{
      static_cast<int64_t>(Literal->getValue().getZExtValue()),
      Literal->getLocation()};
}

/// `"cuda:N"`, the string form a `Device` is parsed from.
std::optional<LiteralOrdinal> stringOrdinal(const Expr *E) {
  const auto *Literal = dyn_cast<StringLiteral>(spelledArgument(E));
  if (!Literal || !Literal->isOrdinary())
    return std::nullopt;
  StringRef Text = Literal->getString();
  unsigned Ordinal = 0;
  if (!Text.consume_front("cuda:") || Text.getAsInteger(10, Ordinal) ||
      Ordinal > std::numeric_limits<int16_t>::max())
    return std::nullopt;
  return LiteralOrdinal{Ordinal, Literal->getBeginLoc()};
}


} // namespace

DeviceIndexUncheckedCheck::DeviceIndexUncheckedCheck(StringRef Name,
                                                     ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context),
      ExtraDeviceCountFunctions(Options.get("ExtraDeviceCountFunctions", "")) {
  for (StringRef Name : deviceCountFunctionNames())
    CountFunctions.push_back(Name.str());
  for (StringRef Extra :
       utils::options::parseStringList(ExtraDeviceCountFunctions))
    CountFunctions.push_back(Extra.str());
}

DeviceIndexUncheckedCheck::~DeviceIndexUncheckedCheck() = default;

void DeviceIndexUncheckedCheck::storeOptions(
    ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraDeviceCountFunctions", ExtraDeviceCountFunctions);
}

void DeviceIndexUncheckedCheck::onStartOfTranslationUnit() {
  Guards.reset();
  Program.reset();
  Reported.clear();
}

void DeviceIndexUncheckedCheck::onEndOfTranslationUnit() {
  onStartOfTranslationUnit();
}

void DeviceIndexUncheckedCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  auto InUserCode = allOf(unless(isExpansionInSystemHeader()),
                          unless(isInUserTemplateInstantiation()));
  // `Device(kCUDA, 1)`, `Device("cuda:1")`, and the `TensorOptions`
  // constructors that forward to them.
  Finder->addMatcher(
      cxxConstructExpr(hasDeclaration(cxxConstructorDecl(ofClass(hasAnyName(
                           "::c10::Device", "::c10::TensorOptions")))),
                       InUserCode)
          .bind("site"),
      this);
  // `TensorOptions().device(kCUDA, 1)`, `.device("cuda:1")`,
  // `.device_index(1)` and the free `device_index(1)`.
  Finder->addMatcher(
      cxxMemberCallExpr(
          callee(cxxMethodDecl(hasAnyName("device", "device_index"),
                               ofClass(hasName("::c10::TensorOptions")))),
          InUserCode)
          .bind("site"),
      this);
  Finder->addMatcher(
      callExpr(callee(functionDecl(hasName("::c10::device_index"))), InUserCode)
          .bind("site"),
      this);
}

void DeviceIndexUncheckedCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *Site = Result.Nodes.getNodeAs<Expr>("site");
  llvm::SmallVector<const Expr *, 2> Args;
  StringRef Callee;
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(Site)) {
    Args.append(Construct->arg_begin(), Construct->arg_end());
  } else if (const auto *Call = dyn_cast<CallExpr>(Site)) {
    Args.append(Call->arg_begin(), Call->arg_end());
    if (const FunctionDecl *Function = Call->getDirectCallee())
      Callee = Function->getName();
  }
  llvm::erase_if(Args,
                 [](const Expr *Arg) { return isa<CXXDefaultArgExpr>(Arg); });

  std::optional<LiteralOrdinal> Ordinal;
  if (Callee == "device_index") {
    if (Args.size() == 1)
      Ordinal = integerOrdinal(Args[0]);
  } else if (Args.size() == 2) {
    if (isCudaDeviceType(Args[0], *Result.Context))
      Ordinal = integerOrdinal(Args[1]);
  } else if (Args.size() == 1) {
    Ordinal = stringOrdinal(Args[0]);
  }
  if (Ordinal && Ordinal->Value > 0)
    reportOrdinal(*Site, Ordinal->Loc, Ordinal->Value, *Result.Context);
}

void DeviceIndexUncheckedCheck::reportOrdinal(const Expr &Site,
                                              SourceLocation OrdinalLoc,
                                              int64_t Ordinal,
                                              ASTContext &Ctx) {
  if (!Guards || &Program->context() != &Ctx) {
    Program = ProgramModel::get(Ctx, TorchApiOptions());
    Guards = std::make_unique<DeviceCountGuards>(*Program, CountFunctions);
  }
  DeviceCountGuards::Proof Facts = Guards->at(Site);
  if (Ordinal <= Facts.GuardedUpTo || !Reported.insert(OrdinalLoc).second)
    return;

  if (!Facts.Comparison || Facts.GuardedUpTo < 0) {
    diag(OrdinalLoc, "hard-coded CUDA device ordinal %0 is never checked "
                     "against torch::cuda::device_count(); "
                     "CUDA_VISIBLE_DEVICES renumbers the devices a process "
                     "sees, so ordinal %0 may not exist")
        << static_cast<int>(Ordinal);
    return;
  }
  diag(OrdinalLoc,
       "hard-coded CUDA device ordinal %0 is above what the "
       "torch::cuda::device_count() check proves (%1 "
       "%plural{1:device|:devices}1); CUDA_VISIBLE_DEVICES renumbers the "
       "devices a process sees, so ordinal %0 may not exist")
      << static_cast<int>(Ordinal) << static_cast<int>(Facts.GuardedUpTo + 1);
  diag(Facts.Comparison->getExprLoc(), "the device count is compared here",
       DiagnosticIDs::Note);
}

} // namespace clang::tidy::torch
