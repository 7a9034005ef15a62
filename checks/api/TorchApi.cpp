//===--- TorchApi.cpp - torch-tidy ----------------------------------------===//

#include "llvm/ADT/StringSwitch.h"
#include "api/StdLibrary.h"
#include "api/TorchApi.h"
#include "api/TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "llvm/ADT/StringSet.h"

namespace clang::tidy::torch {

/// The outermost namespace around \p D ("torch", "at", "c10", ...).
static llvm::StringRef topNamespace(const Decl &D) {
  llvm::StringRef Top;
  for (const DeclContext *DC = D.getDeclContext(); DC; DC = DC->getParent())
    if (const auto *NS = dyn_cast<NamespaceDecl>(DC))
      if (NS->getIdentifier())
        Top = NS->getName();
  return Top;
}

bool isLibraryFunction(const FunctionDecl &FD) {
  if (FD.isInStdNamespace())
    return true;
  llvm::StringRef Top = topNamespace(FD);
  if (Top == "torch" || Top == "at" || Top == "c10" || Top == "caffe2" ||
      Top == "std" || Top == "__gnu_cxx")
    return true;
  // The C library and other global functions of system headers.
  return Top.empty() && !isa<CXXMethodDecl>(FD) &&
         FD.getASTContext().getSourceManager().isInSystemHeader(
             FD.getLocation());
}

bool isEmptyCacheCall(const CallExpr &Call, const TorchApiOptions &Opts) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->getIdentifier())
    return false;
  std::string Qualified = "::" + FD->getQualifiedNameAsString();
  return llvm::is_contained(emptyCacheFunctionNames(),
                            llvm::StringRef(Qualified)) ||
         matchesNameList(*FD, Opts.ExtraEmptyCacheFunctions);
}

bool isOrDerivesFrom(const CXXRecordDecl *Record,
                                 llvm::StringRef QualifiedName) {
  if (!Record)
    return false;
  if (Record->getQualifiedNameAsString() == QualifiedName)
    return true;
  Record = Record->getDefinition();
  return Record &&
         llvm::any_of(Record->bases(), [&](const CXXBaseSpecifier &Base) {
           return isOrDerivesFrom(Base.getType()->getAsCXXRecordDecl(),
                                       QualifiedName);
         });
}

static const CXXRecordDecl *caughtClass(const CXXCatchStmt &Catch) {
  if (!Catch.getExceptionDecl())
    return nullptr; // `catch (...)` says nothing about out-of-memory.
  return Catch.getCaughtType().getNonReferenceType()->getAsCXXRecordDecl();
}

bool catchesOutOfMemoryError(const CXXCatchStmt &Catch) {
  return isOrDerivesFrom(caughtClass(Catch), "c10::OutOfMemoryError");
}

/// Whether a string literal of \p S contains one of \p Messages.
static bool mentionsAny(const Stmt *S, llvm::ArrayRef<std::string> Messages) {
  if (!S)
    return false;
  if (const auto *Literal = dyn_cast<StringLiteral>(S)) {
    if (!Literal->isOrdinary())
      return false;
    std::string Text = Literal->getString().lower();
    return llvm::any_of(Messages, [&](const std::string &M) {
      return !M.empty() && llvm::StringRef(Text).contains(M);
    });
  }
  return llvm::any_of(S->children(), [&](const Stmt *Child) {
    return mentionsAny(Child, Messages);
  });
}

bool isOutOfMemoryHandler(const CXXCatchStmt &Catch,
                          const TorchApiOptions &Opts) {
  if (catchesOutOfMemoryError(Catch))
    return true;
  const CXXRecordDecl *Record = caughtClass(Catch);
  std::string Name = Record ? Record->getQualifiedNameAsString() : "";
  return (Name == "c10::Error" || Name == "std::exception") &&
         mentionsAny(Catch.getHandlerBlock(), Opts.OutOfMemoryMessages);
}

bool isTorchFunction(const FunctionDecl &FD) {
  llvm::StringRef Top = topNamespace(FD);
  return (Top == "torch" || Top == "at" || Top == "c10") &&
         !isa<CXXMethodDecl>(FD);
}

bool isTorchNamespaceDecl(const Decl &D) {
  llvm::StringRef Top = topNamespace(D);
  return Top == "torch" || Top == "at" || Top == "c10";
}

static bool nameIn(const NamedDecl &D, llvm::ArrayRef<std::string> Names) {
  if (Names.empty())
    return false;
  std::string Qualified = "::" + D.getQualifiedNameAsString();
  for (const std::string &N : Names)
    if (N == Qualified || N == Qualified.substr(2))
      return true;
  return false;
}

bool isTensorConversionMethod(llvm::StringRef Name,
                              const TorchApiOptions &Opts) {
  return llvm::is_contained(tensorConversionMethodNames(), Name) ||
         llvm::is_contained(Opts.ExtraConversionMethods, Name);
}

bool isTensorFactory(const FunctionDecl &FD, const TorchApiOptions &Opts) {
  static const llvm::StringSet<> Names = {
      "tensor",   "randn", "rand",     "zeros",      "ones",   "empty",
      "full",     "arange", "eye",     "linspace",   "logspace", "randint",
      "randperm", "from_blob", "scalar_tensor", "empty_strided", "normal",
      "hann_window", "hamming_window", "bartlett_window", "blackman_window",
      "kaiser_window", "tril_indices", "triu_indices"};
  if (!FD.getIdentifier())
    return nameIn(FD, Opts.ExtraFactories);
  llvm::StringRef Name = FD.getName();
  Name.consume_back("_symint"); // the SymInt overloads: randn_symint, ...
  if (Names.contains(Name) && isTorchNamespaceDecl(FD) &&
      !isa<CXXMethodDecl>(FD))
    return true;
  return nameIn(FD, Opts.ExtraFactories);
}

bool isLikeFactory(const FunctionDecl &FD) {
  return FD.getIdentifier() && FD.getName().ends_with("_like") &&
         isTorchNamespaceDecl(FD) && !isa<CXXMethodDecl>(FD);
}

bool isScalarFactoryCall(const CallExpr &Call) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->getIdentifier() || !isTorchNamespaceDecl(*FD))
    return false;
  if (FD->getName() == "scalar_tensor")
    return true;
  if (FD->getName() != "tensor" || Call.getNumArgs() == 0)
    return false;
  // torch::tensor(3.0) is 0-dim; torch::tensor({1, 2}) and
  // torch::tensor(values) of a std::vector or an array are not.
  const Expr *Data = stripConversions(Call.getArg(0));
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(Data);
      Construct && Construct->getNumArgs() == 1)
    Data = stripConversions(Construct->getArg(0));
  QualType T = Data->getType().getNonReferenceType();
  return !isa<InitListExpr, CXXStdInitializerListExpr>(Data) &&
         !T->isArrayType() && !T->isRecordType();
}

bool isSynchronizeCall(const CallExpr &Call, const TorchApiOptions &Opts) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->getIdentifier())
    return false;
  llvm::StringRef N = FD->getName();
  if (const auto *MD = dyn_cast<CXXMethodDecl>(FD))
    // CUDAStream, CUDAEvent, c10::Stream, c10::Event; a project's own
    // methods only through ExtraSyncFunctions.
    return (N == "synchronize" && isTorchNamespaceDecl(*MD->getParent())) ||
           nameIn(*FD, Opts.ExtraSyncFunctions);
  if (N == "cudaDeviceSynchronize" || N == "cudaStreamSynchronize" ||
      N == "cudaEventSynchronize" || N == "cuCtxSynchronize" ||
      N == "cuStreamSynchronize")
    return true;
  // synchronizeDevice: at::accelerator (2.7+).
  if ((N == "synchronize" || N == "device_synchronize" ||
       N == "stream_synchronize" || N == "synchronizeDevice") &&
      isTorchNamespaceDecl(*FD))
    return true;
  return nameIn(*FD, Opts.ExtraSyncFunctions);
}

bool isPinnedAllocator(const FunctionDecl &FD, const TorchApiOptions &Opts) {
  return nameIn(FD, Opts.ExtraPinnedAllocators);
}

const Expr *memberCallObject(const CallExpr &Call) {
  if (const auto *MC = dyn_cast<CXXMemberCallExpr>(&Call))
    return MC->getImplicitObjectArgument()
               ? MC->getImplicitObjectArgument()->IgnoreParenImpCasts()
               : nullptr;
  return nullptr;
}

llvm::StringRef tensorMethodName(const CallExpr &Call) {
  const auto *MC = dyn_cast<CXXMemberCallExpr>(&Call);
  if (!MC)
    return "";
  const CXXMethodDecl *MD = MC->getMethodDecl();
  if (!MD || !MD->getIdentifier())
    return "";
  // The real headers (since 1.11) declare part of the API (device(),
  // is_cuda(), is_pinned(), data_ptr(), ...) on at::TensorBase.
  std::string Class = MD->getParent()->getQualifiedNameAsString();
  return Class == "at::Tensor" || Class == "at::TensorBase" ? MD->getName()
                                                             : "";
}

/// A module: `torch::nn::Module` or a TorchScript `torch::jit::Module`
/// (a handle that shares its object, run through `forward`).
static bool derivesFromModule(const CXXRecordDecl *RD) {
  if (!RD || !RD->hasDefinition())
    return false;
  std::string Name = RD->getQualifiedNameAsString();
  if (Name == "torch::nn::Module" || Name == "torch::jit::Module")
    return true;
  for (const CXXBaseSpecifier &Base : RD->bases())
    if (derivesFromModule(Base.getType()->getAsCXXRecordDecl()))
      return true;
  return false;
}

/// The class template a record instantiates, or the record's own name.
static std::string templateOrRecordName(const CXXRecordDecl *RD) {
  if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD))
    return Spec->getSpecializedTemplate()->getQualifiedNameAsString();
  return RD->getQualifiedNameAsString();
}

static bool isModuleHolderRecord(const CXXRecordDecl *RD) {
  if (!RD || !RD->hasDefinition())
    return false;
  if (templateOrRecordName(RD) == "torch::nn::ModuleHolder")
    return true;
  for (const CXXBaseSpecifier &Base : RD->bases())
    if (isModuleHolderRecord(Base.getType()->getAsCXXRecordDecl()))
      return true;
  return false;
}

bool isModuleHandleType(QualType T) {
  T = T.getNonReferenceType().getCanonicalType();
  if (T->isPointerType())
    T = T->getPointeeType();
  const auto *RD = T->getAsCXXRecordDecl();
  if (!RD)
    return false;
  if (derivesFromModule(RD) || isModuleHolderRecord(RD))
    return true;
  if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD))
    if ((templateOrRecordName(RD) == "std::shared_ptr" ||
         templateOrRecordName(RD) == "std::unique_ptr") &&
        Spec->getTemplateArgs().size() >= 1 &&
        Spec->getTemplateArgs()[0].getKind() == TemplateArgument::Type)
      return derivesFromModule(
          Spec->getTemplateArgs()[0].getAsType()->getAsCXXRecordDecl());
  return false;
}

const CXXRecordDecl *moduleClassOfHandle(QualType T) {
  const CXXRecordDecl *RD = T.getNonReferenceType()->getAsCXXRecordDecl();
  if (T.getNonReferenceType()->isPointerType())
    RD = T.getNonReferenceType()->getPointeeType()->getAsCXXRecordDecl();
  for (unsigned Depth = 0; RD && Depth < 4; ++Depth) {
    if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD)) {
      llvm::StringRef Name = Spec->getSpecializedTemplate()->getName();
      if ((Name == "ModuleHolder" || Name == "shared_ptr" ||
           Name == "unique_ptr") &&
          Spec->getTemplateArgs().size() >= 1 &&
          Spec->getTemplateArgs()[0].getKind() == TemplateArgument::Type) {
        RD = Spec->getTemplateArgs()[0].getAsType()->getAsCXXRecordDecl();
        continue;
      }
    }
    bool Holder = false;
    if (RD->hasDefinition())
      for (const CXXBaseSpecifier &Base : RD->bases())
        if (const auto *Spec = dyn_cast_or_null<ClassTemplateSpecializationDecl>(
                Base.getType()->getAsCXXRecordDecl()))
          if (Spec->getSpecializedTemplate()->getName() == "ModuleHolder") {
            RD = Spec;
            Holder = true;
          }
    if (!Holder)
      return RD;
  }
  return RD;
}

bool mayNameSameModule(QualType A, QualType B) {
  if (!isModuleHandleType(A) || !isModuleHandleType(B))
    return true;
  const CXXRecordDecl *X = moduleClassOfHandle(A);
  const CXXRecordDecl *Y = moduleClassOfHandle(B);
  if (!X || !Y || !X->hasDefinition() || !Y->hasDefinition())
    return true;
  X = X->getDefinition();
  Y = Y->getDefinition();
  return X == Y || X->isDerivedFrom(Y) || Y->isDerivedFrom(X);
}

ModeDependence layerModeDependence(const CXXRecordDecl &Layer) {
  std::string Qualified = Layer.getQualifiedNameAsString();
  llvm::StringRef N(Qualified);
  if (!N.consume_front("torch::nn::") || N.contains("::"))
    return ModeDependence::Unknown;
  N.consume_back("Impl");
  if (N.contains("Dropout") || N.starts_with("BatchNorm") ||
      N.starts_with("Transformer"))
    return ModeDependence::Yes;
  if (N.starts_with("InstanceNorm") || N == "RNN" || N == "LSTM" ||
      N == "GRU" || N == "MultiheadAttention" || N == "Sequential" ||
      N == "ModuleList" || N == "ModuleDict" || N == "AnyModule" ||
      N == "Functional" || N == "Module" || N == "Cloneable")
    return ModeDependence::Unknown;
  return ModeDependence::No;
}

bool isSharedModuleHandleType(QualType T) {
  T = T.getNonReferenceType().getCanonicalType();
  const CXXRecordDecl *RD = T->getAsCXXRecordDecl();
  return RD && isModuleHandleType(T) &&
         (isModuleHolderRecord(RD) || isStdClass(RD, "shared_ptr") ||
          RD->getQualifiedNameAsString() == "torch::jit::Module");
}

bool isErasedModuleType(QualType T) {
  T = T.getNonReferenceType().getCanonicalType();
  if (T->isPointerType())
    T = T->getPointeeType().getCanonicalType();
  const CXXRecordDecl *RD = T->getAsCXXRecordDecl();
  if (RD && (isStdClass(RD, "shared_ptr") || isStdClass(RD, "unique_ptr")))
    if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD);
        Spec && Spec->getTemplateArgs().size() >= 1 &&
        Spec->getTemplateArgs()[0].getKind() == TemplateArgument::Type)
      RD = Spec->getTemplateArgs()[0].getAsType()->getAsCXXRecordDecl();
  return RD && RD->getQualifiedNameAsString() == "torch::nn::Module";
}

llvm::StringRef moduleMemberAccess(QualType Handle) {
  Handle = Handle.getNonReferenceType().getCanonicalType();
  const CXXRecordDecl *RD = Handle->getAsCXXRecordDecl();
  return Handle->isPointerType() || isModuleHolderRecord(RD) ||
                 isStdClass(RD, "shared_ptr") || isStdClass(RD, "unique_ptr")
             ? "->"
             : ".";
}

bool isTorchValueType(QualType T) {
  return isTensorType(T) || isModuleHandleType(T) || isDeviceType(T) ||
         isTensorOptionsType(T) || isScriptValueType(T);
}

bool isDtypeType(QualType T) {
  const auto *Enum = T.getNonReferenceType()->getAs<EnumType>();
  return Enum && Enum->getDecl()->getQualifiedNameAsString() == "c10::ScalarType";
}

bool isDataExampleType(QualType T) {
  const auto *RD = T.getNonReferenceType()->getAsCXXRecordDecl();
  return RD && templateOrRecordName(RD) == "torch::data::Example";
}

bool isDataIteratorType(QualType T) {
  const auto *RD = T.getNonReferenceType()->getAsCXXRecordDecl();
  return RD && templateOrRecordName(RD) == "torch::data::Iterator";
}

bool isNoGradGuardType(QualType T) {
  const auto *RD = T.getNonReferenceType()->getAsCXXRecordDecl();
  if (!RD)
    return false;
  std::string N = RD->getQualifiedNameAsString();
  return N == "c10::NoGradGuard" || N == "c10::InferenceMode" ||
         N == "at::NoGradGuard" || N == "c10::AutoGradMode" ||
         N == "at::AutoGradMode";
}

const Expr *stripConversions(const Expr *E) {
  while (E) {
    const Expr *Prev = E;
    E = E->IgnoreParenImpCasts();
    if (const auto *EWC = dyn_cast<ExprWithCleanups>(E))
      E = EWC->getSubExpr();
    else if (const auto *MTE = dyn_cast<MaterializeTemporaryExpr>(E))
      E = MTE->getSubExpr();
    else if (const auto *BTE = dyn_cast<CXXBindTemporaryExpr>(E))
      E = BTE->getSubExpr();
    else if (const auto *FC = dyn_cast<CXXFunctionalCastExpr>(E))
      E = FC->getSubExpr();
    else if (const auto *SC = dyn_cast<CXXStaticCastExpr>(E);
             SC && SC->getType()->isScalarType())
      E = SC->getSubExpr(); // static_cast<bool>(count), as TORCH_CHECK has it
    else if (const auto *Call = dyn_cast<CallExpr>(E);
             Call && Call->getNumArgs() >= 1 &&
             (Call->getBuiltinCallee() == Builtin::BI__builtin_expect ||
              Call->getBuiltinCallee() ==
                  Builtin::BI__builtin_expect_with_probability))
      E = Call->getArg(0); // C10_UNLIKELY(e): the value of e
    else if (const auto *CE = dyn_cast<CXXConstructExpr>(E)) {
      // A converting or copying constructor of one real argument.
      unsigned Real = 0;
      const Expr *Only = nullptr;
      for (const Expr *Arg : CE->arguments())
        if (!isa<CXXDefaultArgExpr>(Arg)) {
          ++Real;
          Only = Arg;
        }
      // `Net(4)` builds a module from its options: not a conversion.
      bool BuildsModule = Real == 1 && isModuleHandleType(CE->getType()) &&
                          !isModuleHandleType(Only->getType());
      if (Real == 1 && !isa<CXXTemporaryObjectExpr>(CE) && !BuildsModule)
        E = Only;
    }
    if (E == Prev)
      return E;
  }
  return E;
}

const Expr *argumentForParameter(const CallExpr &Call, llvm::StringRef Name) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD)
    return nullptr;
  unsigned Offset = isa<CXXOperatorCallExpr>(Call) && isa<CXXMethodDecl>(FD);
  for (unsigned I = 0; I < FD->getNumParams(); ++I) {
    const ParmVarDecl *P = FD->getParamDecl(I);
    if (!P->getIdentifier() || P->getName() != Name)
      continue;
    if (I + Offset >= Call.getNumArgs())
      return nullptr;
    const Expr *Arg = Call.getArg(I + Offset);
    return isa<CXXDefaultArgExpr>(Arg) ? nullptr : Arg;
  }
  return nullptr;
}

/// `holder->` and `ptr->` are overloaded operator-> calls; returns the holder.
static const Expr *throughArrow(const Expr *Object) {
  Object = Object->IgnoreParenImpCasts();
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Object))
    if (Op->getOperator() == OO_Arrow || Op->getOperator() == OO_Star)
      return Op->getArg(0)->IgnoreParenImpCasts();
  if (const auto *UO = dyn_cast<UnaryOperator>(Object))
    if (UO->getOpcode() == UO_Deref)
      return UO->getSubExpr()->IgnoreParenImpCasts();
  return Object;
}

const Expr *moduleMethodCallReceiver(const CallExpr &Call,
                                     llvm::StringRef Method) {
  const auto *MC = dyn_cast<CXXMemberCallExpr>(&Call);
  if (!MC)
    return nullptr;
  const CXXMethodDecl *MD = MC->getMethodDecl();
  if (!MD || !MD->getIdentifier() || MD->getName() != Method ||
      !derivesFromModule(MD->getParent()))
    return nullptr;
  const Expr *Object = MC->getImplicitObjectArgument();
  if (!Object || isa<CXXThisExpr>(Object->IgnoreParenImpCasts()))
    return nullptr;
  return throughArrow(Object);
}

const Expr *registeredValue(const CallExpr &Call) {
  const auto *MC = dyn_cast<CXXMemberCallExpr>(&Call);
  const CXXMethodDecl *MD = MC ? MC->getMethodDecl() : nullptr;
  if (!MD || !MD->getIdentifier() || Call.getNumArgs() < 2 ||
      !llvm::is_contained({"register_module", "register_parameter",
                           "register_buffer"},
                          MD->getName()) ||
      MD->getParent()->getQualifiedNameAsString() != "torch::nn::Module")
    return nullptr;
  return Call.getArg(1);
}

const Expr *moduleLoadedBy(const CallExpr &Call, const Expr *&Device) {
  Device = nullptr;
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->getIdentifier() || FD->getName() != "load" ||
      FD->getQualifiedNameAsString() != "torch::load" ||
      Call.getNumArgs() < 1 || !isModuleHandleType(Call.getArg(0)->getType()))
    return nullptr;
  Device = argumentForParameter(Call, "device");
  for (unsigned I = 1; !Device && I < Call.getNumArgs(); ++I) {
    QualType T = stripConversions(Call.getArg(I))->getType();
    if (isDeviceType(T) || isDeviceTypeEnum(T))
      Device = Call.getArg(I);
  }
  return Call.getArg(0);
}

/// A type that a TorchScript accessor may return with tensors in it.
static bool mayHoldScriptTensors(QualType T) {
  if (T->isPointerType()) // `tuple_ptr->`
    T = T->getPointeeType();
  if (isTensorType(T) || isScriptValueType(T))
    return true;
  const CXXRecordDecl *Container = containerRecord(T);
  const auto *Spec =
      dyn_cast_or_null<ClassTemplateSpecializationDecl>(Container);
  if (!Spec || Spec->getTemplateArgs().size() == 0 ||
      Spec->getTemplateArgs()[0].getKind() != TemplateArgument::Type)
    return false;
  QualType Element = Spec->getTemplateArgs()[0].getAsType();
  return isTensorType(Element) || isScriptValueType(Element);
}

const Expr *scriptValueSource(const Expr &E) {
  if (!mayHoldScriptTensors(E.getType()))
    return nullptr;
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&E)) {
    if (Op->getNumArgs() == 0)
      return nullptr;
    const Expr *Object = Op->getArg(0)->IgnoreParenImpCasts();
    bool Access = Op->getOperator() == OO_Arrow || Op->getOperator() == OO_Star;
    // `elements()[0]`: an element of a list that an accessor returned.
    bool TemporaryElement = Op->getOperator() == OO_Subscript &&
                            scriptValueSource(*stripConversions(Object));
    return (Access && isScriptValueType(Object->getType())) ||
                   TemporaryElement
               ? Object
               : nullptr;
  }
  const auto *Call = dyn_cast<CXXMemberCallExpr>(&E);
  const Expr *Object = Call ? Call->getImplicitObjectArgument() : nullptr;
  if (!Object)
    return nullptr;
  QualType ObjectType = Object->getType();
  if (ObjectType->isPointerType())
    ObjectType = ObjectType->getPointeeType();
  return isScriptValueType(ObjectType) ? Object : nullptr;
}

bool isScriptModuleLoad(const CallExpr &Call, const Expr *&Device) {
  Device = nullptr;
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->getIdentifier() || FD->getName() != "load" ||
      FD->getQualifiedNameAsString() != "torch::jit::load" ||
      !isModuleHandleType(Call.getType()))
    return false;
  Device = argumentForParameter(Call, "device");
  return true;
}

const Expr *moduleToReceiver(const CallExpr &Call) {
  return moduleMethodCallReceiver(Call, "to");
}

bool matchOwnModuleMethodCall(const CallExpr &Call, ModuleCall &Out) {
  const auto *MC = dyn_cast<CXXMemberCallExpr>(&Call);
  const CXXMethodDecl *MD = MC ? MC->getMethodDecl() : nullptr;
  if (!MD || MD->isStatic() || !MD->getIdentifier() ||
      MD->getName() == "forward" || isTorchNamespaceDecl(*MD) ||
      !derivesFromModule(MD->getParent()))
    return false;
  const Expr *Object = MC->getImplicitObjectArgument();
  if (!Object || isa<CXXThisExpr>(Object->IgnoreParenImpCasts()))
    return false;
  Out.Module = throughArrow(Object);
  Out.Inputs.assign(Call.arg_begin(), Call.arg_end());
  return true;
}

bool matchModuleCall(const Expr &E, ModuleCall &Out) {
  const auto *Call = dyn_cast<CallExpr>(&E);
  if (!Call)
    return false;
  if (const Expr *Receiver = moduleMethodCallReceiver(*Call, "forward")) {
    Out.Module = Receiver;
    Out.Inputs.assign(Call->arg_begin(), Call->arg_end());
    return true;
  }
  // `forward(x)` in another method of the module (a training_step hook):
  // the module's own forward. A type-erased `AnyModule` runs one too.
  if (const auto *MC = dyn_cast<CXXMemberCallExpr>(Call)) {
    const CXXMethodDecl *MD = MC->getMethodDecl();
    const Expr *Object = MC->getImplicitObjectArgument();
    if (MD && MD->getIdentifier() && MD->getName() == "forward" && Object &&
        MD->getParent()->getQualifiedNameAsString() == "torch::nn::AnyModule") {
      Out.Module = throughArrow(Object);
      Out.Inputs.assign(Call->arg_begin(), Call->arg_end());
      Out.TypeErased = true;
      return true;
    }
    if (MD && MD->getIdentifier() && MD->getName() == "forward" &&
        derivesFromModule(MD->getParent()) && Object &&
        isa<CXXThisExpr>(Object->IgnoreParenImpCasts())) {
      Out.Module = Object->IgnoreParenImpCasts();
      Out.Inputs.assign(Call->arg_begin(), Call->arg_end());
      return true;
    }
  }
  const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call);
  if (!Op || Op->getOperator() != OO_Call || Op->getNumArgs() == 0)
    return false;
  const Expr *Holder = Op->getArg(0)->IgnoreParenImpCasts();
  if (!isModuleHolderRecord(Holder->getType()->getAsCXXRecordDecl()))
    return false;
  Out.Module = Holder;
  Out.Inputs.assign(Op->arg_begin() + 1, Op->arg_end());
  return true;
}

} // namespace clang::tidy::torch

namespace clang::tidy::torch {

std::string TorchApiOptions::key() const {
  std::string Key;
  for (const auto *List :
       {&ExtraSyncFunctions, &ExtraFactories, &ExtraPinnedAllocators,
        &ExtraBackwardFunctions, &ExtraStepFunctions, &GuardFunctions,
        &DeviceSelectorFunctions, &ExtraDeviceCountFunctions, &GuardTypes,
        &AccumulatingFunctions, &ExtraEmptyCacheFunctions,
        &EvaluationFunctions, &ZeroGradFunctions, &AutocastGuardTypes,
        &ExtraConversionMethods, &OutOfMemoryMessages}) {
    for (const std::string &N : *List)
      Key += N + ",";
    Key += ";";
  }
  return Key + std::to_string(MaxLoopDepth);
}

} // namespace clang::tidy::torch
