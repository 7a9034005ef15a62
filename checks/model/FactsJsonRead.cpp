//===--- FactsJsonRead.cpp - torch-tidy -----------------------------------===//
//
// Reading facts back (FactsJson.cpp has the format and the writer): against
// the reading TU's declarations; what it cannot name is unknown.
//
//===----------------------------------------------------------------------===//

#include "ExternalSummaries.h"
#include "FactsJson.h"
#include "FactsJsonNames.h"
#include "ProgramModel.h"
#include "clang/AST/DeclCXX.h"
#include "llvm/Support/Path.h"

namespace clang::tidy::torch {

using namespace factsjson;

//===--- Reading -----------------------------------------------------------===//

SourceLocation FactReader::place(const llvm::json::Value *V) const {
  const llvm::json::Object *O = V ? V->getAsObject() : nullptr;
  if (!O)
    return {};
  std::optional<llvm::StringRef> File = O->getString("file");
  std::optional<int64_t> Line = O->getInteger("line");
  std::optional<int64_t> Column = O->getInteger("column");
  if (!File || !Line || !Column || *Line <= 0 || *Column <= 0)
    return {};
  SourceManager &SM = Program.context().getSourceManager();
  llvm::Expected<FileEntryRef> Entry = SM.getFileManager().getFileRef(*File);
  if (!Entry) {
    llvm::consumeError(Entry.takeError());
    return {};
  }
  FileID FID = SM.getOrCreateFileID(*Entry, SrcMgr::C_User);
  return SM.translateLineCol(FID, unsigned(*Line), unsigned(*Column));
}

const CallStep *FactReader::path(const llvm::json::Array *Steps) const {
  if (!Steps)
    return nullptr;
  const CallStep *Next = nullptr;
  for (size_t I = Steps->size(); I-- > 0;) {
    const llvm::json::Value &Step = (*Steps)[I];
    const llvm::json::Object *O = Step.getAsObject();
    std::optional<llvm::StringRef> Callee =
        O ? O->getString("callee") : std::nullopt;
    Next = Program.step(place(&Step), Callee ? *Callee : "a function", Next);
  }
  return Next;
}

const ValueDecl *FactReader::entry(const llvm::json::Value *V) const {
  const llvm::json::Object *O = V ? V->getAsObject() : nullptr;
  if (!O)
    return nullptr;
  if (std::optional<int64_t> I = O->getInteger("param")) {
    if (!F || *I < 0 || unsigned(*I) >= F->getNumParams())
      return nullptr;
    return F->getParamDecl(unsigned(*I));
  }
  if (std::optional<llvm::StringRef> Name = O->getString("field")) {
    const auto *Method = dyn_cast_or_null<CXXMethodDecl>(F);
    if (!Method)
      return nullptr;
    for (const FieldDecl *Field : Method->getParent()->fields())
      if (Field->getName() == *Name)
        return Field;
    return nullptr;
  }
  if (std::optional<llvm::StringRef> USR = O->getString("global"))
    return dyn_cast_or_null<ValueDecl>(Program.declarationOf(*USR));
  return nullptr;
}

template <typename T, size_t N>
static Sourced<T> readSourced(const llvm::json::Object *O,
                              const llvm::StringLiteral (&Names)[N],
                              const FactReader &R) {
  Sourced<T> S;
  if (!O)
    return S;
  S.Value = valueOf<T>(O->getString("value"), Names, T());
  S.Entry = R.entry(O->get("entry"));
  if (S.Entry) {
    S.AlsoEntry = R.entry(O->get("alsoEntry"));
    S.Otherwise = valueOf<T>(O->getString("otherwise"), Names, T());
  }
  S.Origin = R.place(O->get("origin"));
  S.Via = R.path(O->getArray("via"));
  return S;
}

ValueFacts FactReader::facts(const llvm::json::Object *O) const {
  ValueFacts V;
  if (!O)
    return V;
  if (const llvm::json::Object *D = O->getObject("device")) {
    llvm::StringRef Kind = D->getString("kind").value_or("unknown");
    if (Kind == "cpu")
      V.Device.Value = DeviceValue::cpu();
    else if (Kind == "cuda")
      V.Device.Value = DeviceValue::cuda(int(D->getInteger("ordinal").value_or(-1)));
    else if (Kind == "other")
      V.Device.Value = DeviceValue::other();
    else if (Kind == "symbolic-param") {
      std::optional<int64_t> I = D->getInteger("holderParam");
      if (F && I && *I >= 0 && unsigned(*I) < F->getNumParams())
        V.Device.Value = DeviceValue::symbolic(F->getParamDecl(unsigned(*I)));
    } else if (Kind == "symbolic") {
      // A device variable of another TU is still one: it may hold CUDA.
      if (const NamedDecl *Holder =
              Program.declarationOf(D->getString("holder").value_or("")))
        V.Device.Value = DeviceValue::symbolic(Holder);
      else if (std::optional<llvm::StringRef> Described =
                   D->getString("described"))
        V.Device.Value = DeviceValue::symbolicElsewhere(Program.intern(*Described).data());
    }
    V.Device.Entry = entry(D->get("entry"));
    V.Device.AlsoEntry = V.Device.Entry ? entry(D->get("alsoEntry")) : nullptr;
    V.Device.EitherEntry =
        V.Device.AlsoEntry && D->getBoolean("eitherEntry").value_or(false);
    V.Device.Origin = place(D->get("origin"));
    V.Device.Via = path(D->getArray("via"));
    // A fact this TU cannot name is unknown, and has no origin to show.
    if (!V.Device.Value.isKnown() && !V.Device.Entry)
      V.Device = {};
  }
  V.Pin = readSourced<Pinning>(O->getObject("pin"), PinNames, *this);
  V.Graph = readSourced<GraphState>(O->getObject("graph"), GraphNames, *this);
  V.Mode = readSourced<ModuleMode>(O->getObject("mode"), ModeNames, *this);
  V.ModeLayers = valueOf<Tri>(O->getString("modeLayers"), TriNames, Tri::Unknown);
  V.HasParameters =
      valueOf<Tri>(O->getString("hasParameters"), TriNames, Tri::Unknown);
  V.MeanLoss = valueOf<Tri>(O->getString("meanLoss"), TriNames, Tri::Unknown);
  V.HalfAutocast = place(O->get("halfAutocast"));
  V.PendingCopy = place(O->get("pending"));
  V.PendingVia = path(O->getArray("pendingVia"));
  V.PendingIf = entry(O->get("pendingIf"));
  V.ConflictIf = entry(O->get("conflictIf"));
  // A condition this TU cannot name: not known to be pending.
  if (O->get("pendingIf") && !V.PendingIf)
    V.clearPendingCopy();
  V.ConvertedCopy = place(O->get("converted"));
  V.ConvertedVia = path(O->getArray("convertedVia"));
  V.OrdinalSpelled = place(O->get("ordinalAt"));
  V.SpelledOrdinal = V.OrdinalSpelled.isValid()
                         ? O->getInteger("ordinal").value_or(0)
                         : 0;
  V.MinDims = static_cast<uint8_t>(
      std::clamp<int64_t>(O->getInteger("minDims").value_or(0), 0, 8));
  V.FromDeviceConflict = O->getBoolean("deviceConflict").value_or(false);
  V.DeviceUnset = O->getBoolean("deviceUnset").value_or(false);
  V.KeepsCallerFacts = O->getBoolean("keepsCallerFacts").value_or(false);
  if (const llvm::json::Object *S = O->getObject("scalar"))
    V.Scalar = scalarFromJSON(*S);
  V.CallablesKnown = O->getBoolean("callablesKnown").value_or(false);
  if (const llvm::json::Array *USRs = O->getArray("callables"))
    for (const llvm::json::Value &USR : *USRs) {
      const auto *F = USR.getAsString()
                          ? dyn_cast_or_null<FunctionDecl>(
                                Program.declarationOf(*USR.getAsString()))
                          : nullptr;
      if (F)
        V.Callables.push_back(F);
      else
        V.CallablesKnown = false; // a function this TU cannot name
    }
  return V;
}

PathFacts FactReader::pathFacts(const llvm::json::Object *O) const {
  PathFacts P;
  if (!O)
    return P;
  P.Cuda = valueOf<CudaGuard>(O->getString("cuda"), CudaNames, CudaGuard::Entry);
  P.Grad = valueOf<GradMode>(O->getString("grad"), GradNames, GradMode::Entry);
  P.CountAtLeast = O->getInteger("count").value_or(0);
  P.CudaSelectedBefore = O->getBoolean("selected").value_or(false);
  return P;
}

LoopContext FactReader::loop(const llvm::json::Object *O) const {
  LoopContext L;
  if (!O)
    return L;
  L.TrainingLoop = place(O->get("training"));
  L.TrainingCall = place(O->get("trainingCall"));
  L.TrainingCallee = Program.intern(O->getString("trainingCallee").value_or(""));
  L.Loop = place(O->get("loop"));
  L.LoopWithoutBackward = O->getBoolean("withoutBackward").value_or(false);
  L.EveryCall = O->getBoolean("everyCall").value_or(false);
  // A training loop or a loop the reading TU cannot locate still counts.
  if (L.TrainingLoop.isInvalid() && O->get("training"))
    L.TrainingLoop = F ? F->getLocation() : SourceLocation();
  if (L.Loop.isInvalid() && O->get("loop"))
    L.Loop = F ? F->getLocation() : SourceLocation();
  return L;
}

/// The class whose fields a path below a value of type \p T names.
static const CXXRecordDecl *recordOf(QualType T) {
  return T.isNull() ? nullptr : T.getNonReferenceType()->getAsCXXRecordDecl();
}

Location FactReader::location(const llvm::json::Value *V) const {
  const llvm::json::Object *O = V ? V->getAsObject() : nullptr;
  if (!O)
    return {};
  llvm::StringRef Root = O->getString("root").value_or("");
  Location L;
  const CXXRecordDecl *Record = nullptr;
  if (Root == "param") {
    std::optional<int64_t> I = O->getInteger("index");
    if (!F || !I || *I < 0 || unsigned(*I) >= F->getNumParams())
      return {};
    L = Location::local(F->getParamDecl(unsigned(*I)));
    Record = recordOf(F->getParamDecl(unsigned(*I))->getType());
  } else if (Root == "this") {
    const auto *Method = dyn_cast_or_null<CXXMethodDecl>(F);
    if (!Method)
      return {};
    L = Location::thisObject();
    Record = Method->getParent();
  } else if (Root == "global") {
    const auto *G = dyn_cast_or_null<VarDecl>(
        Program.declarationOf(O->getString("usr").value_or("")));
    if (!G)
      return {};
    L = Location::global(G);
    Record = recordOf(G->getType());
  } else if (Root == "return") {
    L = Location::returned();
    Record = F ? recordOf(F->getReturnType()) : nullptr;
  } else {
    return {};
  }
  if (const llvm::json::Array *Path = O->getArray("path"))
    for (const llvm::json::Value &Step : *Path) {
      const llvm::json::Object *S = Step.getAsObject();
      if (!S)
        return {};
      if (std::optional<llvm::StringRef> Name = S->getString("field")) {
        // Fields are looked up on the record of the previous step.
        const FieldDecl *Found = nullptr;
        if (Record)
          for (const FieldDecl *Field : Record->fields())
            if (Field->getName() == *Name)
              Found = Field;
        if (!Found)
          return {};
        L = L.child(Selector::field(Found));
        const CXXRecordDecl *Next = Found->getType()->getAsCXXRecordDecl();
        Record = Next;
      } else if (S->getBoolean("element")) {
        L = L.child(Selector::element());
        Record = nullptr;
      } else if (std::optional<int64_t> I = S->getInteger("tuple")) {
        L = L.child(Selector::tupleElement(unsigned(*I)));
        Record = nullptr;
      }
      if (!L)
        return {};
    }
  return L;
}

std::optional<Obligation>
FactReader::obligation(const llvm::json::Object &O) const {
  Obligation Ob;
  Ob.Kind = Requirement::named(O.getString("kind").value_or(""));
  if (!Ob.Kind)
    return std::nullopt; // a requirement this build does not know
  if (const llvm::json::Array *Operands = O.getArray("operands"))
    for (const llvm::json::Value &V : *Operands)
      if (const llvm::json::Object *Op = V.getAsObject()) {
        Operand X;
        X.Facts = facts(Op->getObject("facts"));
        X.Name = Op->getString("name").value_or("").str();
        X.Storage = location(Op->get("storage"));
        Ob.Site.Operands.push_back(std::move(X));
      }
  Ob.Site.What = O.getString("what").value_or("").str();
  Ob.Site.Flags = unsigned(O.getInteger("flags").value_or(0));
  Ob.Context.Path = pathFacts(O.getObject("path"));
  Ob.Context.Loop = loop(O.getObject("loop"));
  Ob.At = place(O.get("at"));
  Ob.Via = path(O.getArray("via"));
  return Ob;
}

std::optional<FunctionSummary>
FactReader::summary(const llvm::json::Object &O) const {
  if (!O.getBoolean("known").value_or(false))
    return std::nullopt;
  FunctionSummary S;
  S.Known = true;
  auto Effects = [&](const llvm::json::Array *List,
                     std::vector<SummaryEffect> &Out) {
    if (List)
      for (const llvm::json::Value &V : *List)
        if (const llvm::json::Object *E = V.getAsObject())
          if (Location L = location(E->get("at")))
            Out.push_back({L, facts(E->getObject("facts"))});
  };
  Effects(O.getArray("returns"), S.Returns);
  S.ReturnedStorage = location(O.get("returnedStorage"));
  Effects(O.getArray("effects"), S.Effects);
  if (const llvm::json::Array *Clobbers = O.getArray("clobbers"))
    for (const llvm::json::Value &V : *Clobbers)
      if (Location L = location(&V))
        S.Clobbers.push_back(L);
  S.ExitGrad = valueOf<GradMode>(O.getString("exitGrad"), GradNames,
                                 GradMode::Entry);
  if (const llvm::json::Array *Obligations = O.getArray("obligations"))
    for (const llvm::json::Value &V : *Obligations)
      if (const llvm::json::Object *Ob = V.getAsObject())
        if (std::optional<Obligation> X = obligation(*Ob))
          S.Obligations.push_back(std::move(*X));
  S.Backward = place(O.get("backward"));
  S.Step = place(O.get("step"));
  // Entries this TU cannot name may be any argument: not known.
  if (const llvm::json::Array *Entries = O.getArray("backwardEntries")) {
    S.BackwardEntriesKnown = true;
    for (const llvm::json::Value &V : *Entries)
      if (const ValueDecl *D = entry(&V))
        S.BackwardEntries.push_back(D);
      else
        S.BackwardEntriesKnown = false;
  }
  S.TrainsPerCall = O.getBoolean("trainsPerCall").value_or(false);
  S.SelectsCuda = O.getBoolean("selectsCuda").value_or(false);
  // A backward or a step the reading TU cannot locate still runs.
  const llvm::json::Value *Backward = O.get("backward");
  const llvm::json::Value *Step = O.get("step");
  if (S.Backward.isInvalid() && Backward && Backward->getAsObject())
    S.Backward = F ? F->getLocation() : SourceLocation();
  if (S.Step.isInvalid() && Step && Step->getAsObject())
    S.Step = F ? F->getLocation() : SourceLocation();
  S.MaySynchronize = O.getBoolean("maySynchronize").value_or(true);
  // Unknown: as if it reset and rescaled them (silence), with nothing left
  // behind. A place this TU cannot name is the callee's declaration.
  S.ResetsGradients = O.getBoolean("resetsGradients").value_or(true);
  S.SettlesGradients = O.getBoolean("settlesGradients").value_or(true);
  S.RescalesGradients = O.getBoolean("rescalesGradients").value_or(true);
  auto Place = [&](llvm::StringRef Key) {
    SourceLocation L = place(O.get(Key));
    const llvm::json::Value *V = O.get(Key);
    if (L.isInvalid() && V && V->getAsObject())
      L = F ? F->getLocation() : SourceLocation();
    return L;
  };
  S.StepWithoutReset = Place("stepWithoutReset");
  S.StepRun = Place("stepRun");
  S.BackwardNotStepped = Place("backwardNotStepped");
  S.CountsIterations = O.getBoolean("countsIterations").value_or(false);
  // Unknown: as if it left autocast alone.
  S.AutocastAtExit = valueOf<AutocastState>(O.getString("autocastAtExit"),
                                            AutocastNames, AutocastState::Entry);
  S.AutocastParam =
      static_cast<int>(O.getInteger("autocastParam").value_or(-1));
  if (S.AutocastAtExit == AutocastState::AsParameter && S.AutocastParam < 0)
    S.AutocastAtExit = AutocastState::Unknown;
  S.MayThrow = O.getBoolean("mayThrow").value_or(false);
  S.ClobbersModes = O.getBoolean("clobbersModes").value_or(false);
  S.RunsOwnLayers = O.getBoolean("runsOwnLayers").value_or(false);
  S.AutocastHalf = O.getBoolean("autocastHalf").value_or(false);
  S.AutocastHalfAsEntry = O.getBoolean("autocastHalfAsEntry").value_or(false);
  S.OpensAutocast = O.getBoolean("opensAutocast").value_or(false);
  S.SetsCudaDtype = O.getBoolean("setsCudaDtype").value_or(false);
  S.KeepsEntryCudaDtype = O.getBoolean("keepsEntryCudaDtype").value_or(false);
  S.CudaDtypeHalf =
      valueOf<Tri>(O.getString("cudaDtypeHalf"), TriNames, Tri::Unknown);
  S.MayRunOpaqueBackward = O.getBoolean("mayRunOpaqueBackward").value_or(true);
  return S;
}

} // namespace clang::tidy::torch
