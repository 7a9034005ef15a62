//===--- Devices.cpp - torch-tidy -----------------------------------------===//

#include "Devices.h"
#include "StdLibrary.h"
#include "TorchApi.h"
#include "TorchMatchers.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include <limits>

namespace clang::tidy::torch {

static bool isRecordNamed(const CXXRecordDecl *RD, llvm::StringRef Name) {
  return RD && RD->getQualifiedNameAsString() == Name;
}

static const CXXRecordDecl *recordOf(QualType T) {
  if (T.isNull())
    return nullptr;
  return T.getNonReferenceType().getCanonicalType()->getAsCXXRecordDecl();
}

static bool isStdStringRecord(const CXXRecordDecl *RD) {
  if (!RD)
    return false;
  std::string N = RD->getQualifiedNameAsString();
  return N == "std::basic_string" || N == "std::__cxx11::basic_string" ||
         N == "std::basic_string_view" || N == "c10::basic_string_view";
}

/// `c10::optional<c10::Device>` / `std::optional<c10::Device>`.
static bool isOptionalDeviceRecord(const CXXRecordDecl *RD) {
  const auto *Spec = dyn_cast_or_null<ClassTemplateSpecializationDecl>(RD);
  if (!Spec || Spec->getName() != "optional")
    return false;
  const TemplateArgumentList &Args = Spec->getTemplateArgs();
  return Args.size() == 1 && Args[0].getKind() == TemplateArgument::Type &&
         isRecordNamed(recordOf(Args[0].getAsType()), "c10::Device");
}

static bool isDeviceCarrier(const CXXRecordDecl *RD) {
  return isRecordNamed(RD, "c10::Device") ||
         isRecordNamed(RD, "c10::TensorOptions") || isOptionalDeviceRecord(RD);
}

const Expr *stripToDeviceLiteral(const Expr *E) {
  for (unsigned I = 0; E && I < 16; ++I) {
    E = E->IgnoreParenImpCasts();
    if (const auto *M = dyn_cast<MaterializeTemporaryExpr>(E))
      E = M->getSubExpr();
    else if (const auto *B = dyn_cast<CXXBindTemporaryExpr>(E))
      E = B->getSubExpr();
    else if (const auto *F = dyn_cast<FullExpr>(E))
      E = F->getSubExpr();
    else if (const auto *C = dyn_cast<ExplicitCastExpr>(E))
      E = C->getSubExpr();
    else if (const auto *CE = dyn_cast<CXXConstructExpr>(E)) {
      const CXXRecordDecl *RD = CE->getConstructor()->getParent();
      if (CE->getNumArgs() >= 1 &&
          (isDeviceCarrier(RD) || isStdStringRecord(RD)))
        E = CE->getArg(0);
      else
        return E;
    } else
      return E;
  }
  return E;
}

DeviceLiteralKind classifyDeviceLiteral(const Expr &E) {
  const Expr *X = E.IgnoreParenImpCasts();
  if (const auto *DRE = dyn_cast<DeclRefExpr>(X)) {
    const ValueDecl *D = DRE->getDecl();
    llvm::StringRef Name = D->getDeclName().isIdentifier() ? D->getName() : "";
    if (const auto *ECD = dyn_cast<EnumConstantDecl>(D)) {
      const auto *ED = dyn_cast<EnumDecl>(ECD->getDeclContext());
      if (!ED || ED->getQualifiedNameAsString() != "c10::DeviceType")
        return DeviceLiteralKind::None;
      if (Name == "CUDA")
        return DeviceLiteralKind::CUDA;
      if (Name == "CPU")
        return DeviceLiteralKind::CPU;
      return DeviceLiteralKind::None;
    }
    if (const auto *VD = dyn_cast<VarDecl>(D)) {
      if ((Name != "kCUDA" && Name != "kCPU") ||
          !isDeviceTypeEnum(VD->getType()))
        return DeviceLiteralKind::None;
      const auto *NS = dyn_cast<NamespaceDecl>(VD->getDeclContext());
      if (!NS || NS->getQualifiedNameAsString() != "c10")
        return DeviceLiteralKind::None;
      return Name == "kCUDA" ? DeviceLiteralKind::CUDA : DeviceLiteralKind::CPU;
    }
    return DeviceLiteralKind::None;
  }
  if (const auto *SL = dyn_cast<StringLiteral>(X)) {
    if (!SL->isOrdinary())
      return DeviceLiteralKind::None;
    llvm::StringRef S = SL->getString();
    if (S == "cpu")
      return DeviceLiteralKind::CPU;
    if (!S.consume_front("cuda"))
      return DeviceLiteralKind::None;
    if (S.empty())
      return DeviceLiteralKind::CUDA;
    if (!S.consume_front(":") || S.empty())
      return DeviceLiteralKind::None;
    for (char C : S)
      if (C < '0' || C > '9')
        return DeviceLiteralKind::None;
    return DeviceLiteralKind::CUDA;
  }
  return DeviceLiteralKind::None;
}

static bool isTensorMethodCall(const Expr &E, llvm::StringRef Name) {
  const auto *Call = dyn_cast<CallExpr>(&E);
  return Call && tensorMethodName(*Call) == Name;
}

bool isTensorCudaCall(const Expr &E) { return isTensorMethodCall(E, "cuda"); }
bool isTensorCpuCall(const Expr &E) { return isTensorMethodCall(E, "cpu"); }

bool isAvailabilityQuery(const FunctionDecl &FD, const TorchApiOptions &Opts) {
  static const llvm::StringRef Names[] = {
      "torch::cuda::is_available",
      "torch::cuda::cudnn_is_available",
      "at::cuda::is_available",
      "at::hasCUDA",
      "at::Context::hasCUDA",
      "at::globalContext",
  };
  if (!FD.getDeclName().isIdentifier())
    return false;
  std::string Q = FD.getQualifiedNameAsString();
  for (llvm::StringRef N : Names)
    if (Q == N && N != "at::globalContext")
      return true;
  return matchesNameList(FD, Opts.GuardFunctions);
}

bool isDeviceCountFunction(const FunctionDecl &FD,
                           const TorchApiOptions &Opts) {
  if (!FD.getDeclName().isIdentifier())
    return false;
  std::string Q = FD.getQualifiedNameAsString();
  for (llvm::StringRef N : deviceCountFunctionNames()) {
    N.consume_front("::");
    if (Q == N)
      return true;
  }
  return matchesNameList(FD, Opts.ExtraDeviceCountFunctions);
}

const Expr *deviceCountOutArgument(const CallExpr &Call) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->getIdentifier() || FD->getName() != "cudaGetDeviceCount" ||
      Call.getNumArgs() != 1)
    return nullptr;
  const auto *UO = dyn_cast<UnaryOperator>(Call.getArg(0)->IgnoreParenImpCasts());
  if (!UO || UO->getOpcode() != UO_AddrOf)
    return nullptr;
  return UO->getSubExpr();
}

/// Functions that take a device, possibly through a forwarding template
/// (`TensorOptions::device(Args&&...)`), so that a DeviceType argument is
/// itself the selection.
static bool isDeviceTakingFunction(const FunctionDecl &FD) {
  if (!FD.getDeclName().isIdentifier())
    return false;
  llvm::StringRef Name = FD.getName();
  return (Name == "to" || Name == "device" || Name == "set_device") &&
         isTorchNamespaceDecl(FD);
}

DeviceLiteralUse classifyDeviceLiteralUse(const Expr &Literal,
                                          const ParentMap &PM,
                                          const TorchApiOptions &Opts) {
  // The Device / TensorOptions the literal has been converted to so far.
  const CXXRecordDecl *Built = nullptr;
  const auto Result = [&] {
    return Built ? DeviceLiteralUse::Selection : DeviceLiteralUse::Other;
  };
  const Stmt *Child = &Literal;
  for (unsigned Depth = 0; Depth < 32; ++Depth) {
    const auto *Parent = dyn_cast_or_null<Expr>(PM.getParent(Child));
    if (!Parent)
      return Result(); // a return, a variable's initialiser, the top, ...
    if (isa<ImplicitCastExpr, ParenExpr, MaterializeTemporaryExpr,
            CXXBindTemporaryExpr, FullExpr>(Parent)) {
      Child = Parent;
      continue;
    }
    if (const auto *Cast = dyn_cast<ExplicitCastExpr>(Parent)) {
      QualType T = Cast->getType();
      if (!Built && !isDeviceTypeEnum(T) && !isDeviceCarrier(recordOf(T)) &&
          !isStdStringRecord(recordOf(T)))
        return DeviceLiteralUse::Other; // e.g. static_cast<int>(kCUDA)
      Child = Parent;
      continue;
    }
    if (const auto *CO = dyn_cast<ConditionalOperator>(Parent)) {
      if (Child == CO->getCond())
        return DeviceLiteralUse::Other;
      Child = Parent;
      continue;
    }
    if (const auto *CE = dyn_cast<CXXConstructExpr>(Parent)) {
      const CXXRecordDecl *RD = CE->getConstructor()->getParent();
      if (isDeviceCarrier(RD)) {
        if (!Built || !isRecordNamed(RD, "c10::Device"))
          Built = RD;
        Child = Parent;
        continue;
      }
      if (!Built && isStdStringRecord(RD)) {
        Child = Parent;
        continue;
      }
      return Result(); // a Device handed to some other class
    }
    if (const auto *Call = dyn_cast<CallExpr>(Parent)) {
      if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call))
        if (Op->isComparisonOp())
          return DeviceLiteralUse::Other;
      const FunctionDecl *FD = Call->getDirectCallee();
      if (FD && isDeviceSelector(*FD, Opts))
        return DeviceLiteralUse::SelectorArgument;
      if (Built)
        return DeviceLiteralUse::Selection;
      if (FD && isDeviceTakingFunction(*FD) && Child != Call->getCallee())
        return DeviceLiteralUse::Selection;
      // `torch::load(module, path, kCUDA)` loads onto that device.
      if (const Expr *LoadDevice = nullptr;
          moduleLoadedBy(*Call, LoadDevice) && LoadDevice &&
          stripConversions(LoadDevice) == stripConversions(cast<Expr>(Child)))
        return DeviceLiteralUse::Selection;
      return DeviceLiteralUse::Other;
    }
    if (isa<MemberExpr>(Parent)) {
      // A method called on the object: `TensorOptions(kCUDA).dtype(...)`
      // still selects; `Device(kCUDA).str()` does not.
      return isRecordNamed(Built, "c10::TensorOptions")
                 ? DeviceLiteralUse::Selection
                 : DeviceLiteralUse::Other;
    }
    if (const auto *BO = dyn_cast<BinaryOperator>(Parent))
      if (BO->isComparisonOp())
        return DeviceLiteralUse::Other;
    return Result();
  }
  return Result();
}

bool isDeviceSelector(const FunctionDecl &FD, const TorchApiOptions &Opts) {
  return matchesNameList(FD, Opts.DeviceSelectorFunctions);
}

bool isDeviceLiteral(const Expr *E) {
  if (isa<StringLiteral>(E))
    return true;
  if (const auto *Ref = dyn_cast<DeclRefExpr>(E))
    return isDeviceTypeEnum(Ref->getType()) &&
           (isa<EnumConstantDecl>(Ref->getDecl()) ||
            (isa<VarDecl>(Ref->getDecl()) &&
             cast<VarDecl>(Ref->getDecl())->isConstexpr()));
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(E))
    return isDeviceType(Construct->getType()) && Construct->getNumArgs() >= 1 &&
           !isDeviceType(Construct->getArg(0)->getType());
  return false;
}

//===--- Hard-coded ordinals -----------------------------------------------===//

/// Strips what the compiler adds around a spelled argument: implicit
/// conversions, temporaries, parentheses, and the `std::string` built from
/// a string literal on its way to `Device(const std::string &)`.
static const Expr *spelledArgument(const Expr *E) {
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

static bool isCudaDeviceType(const Expr *E, const ASTContext &Ctx) {
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

const Expr *cudaOrdinalArgument(const Stmt &S, const ASTContext &Ctx,
                                bool &IsString) {
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
  IsString = false;
  if (Callee == "device_index")
    return Args.size() == 1 ? Args[0] : nullptr;
  if (Args.size() == 2)
    return isCudaDeviceType(Args[0], Ctx) ? Args[1] : nullptr;
  if (Args.size() != 1)
    return nullptr;
  // `Device(spec)`: a string, not a Device, DeviceType or TensorOptions.
  if (!isStringType(Args[0]->getType()))
    return nullptr;
  IsString = true;
  return Args[0];
}

} // namespace clang::tidy::torch
