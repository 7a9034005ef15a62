//===--- FactsJson.cpp - torch-tidy ---------------------------------------===//
//
//   FACTS   = {"device": SOURCED, "pin": SOURCED, "graph": SOURCED,
//              "mode": SOURCED, "modeLayers", "hasParameters", "pending",
//              "zeroDim", "deviceUnset", "scalar", "callable"}
//   SOURCED = {"value", "entry": ENTRY, "origin": PLACE, "via": [STEP]}
//   ENTRY   = {"param": N} | {"field": NAME} | {"global": USR}
//   PLACE   = {"file", "line", "column"}, STEP = PLACE + {"callee"}
//   LOC     = {"root": "param"|"this"|"global"|"return", ..., "path": [SEL]}
//
// Only facts that differ from "unknown" are written.
//
//===----------------------------------------------------------------------===//

#include "FactsJson.h"
#include "ExternalSummaries.h"
#include "ProgramModel.h"
#include "clang/AST/DeclCXX.h"
#include "llvm/Support/Path.h"

namespace clang::tidy::torch {

//===--- Names of enumerated facts -----------------------------------------===//

namespace {
constexpr llvm::StringLiteral PinNames[] = {"unknown", "pinned", "pageable"};
constexpr llvm::StringLiteral GraphNames[] = {"unknown", "graph", "no-graph"};
constexpr llvm::StringLiteral ModeNames[] = {"unknown", "train", "eval"};
constexpr llvm::StringLiteral TriNames[] = {"unknown", "yes", "no"};
constexpr llvm::StringLiteral CudaNames[] = {"unguarded", "entry", "checked"};
constexpr llvm::StringLiteral GradNames[] = {"entry", "enabled", "disabled",
                                             "unknown"};

template <typename T, size_t N>
llvm::StringRef nameOf(T V, const llvm::StringLiteral (&Names)[N]) {
  return unsigned(V) < N ? llvm::StringRef(Names[unsigned(V)]) : "unknown";
}
template <typename T, size_t N>
T valueOf(std::optional<llvm::StringRef> S, const llvm::StringLiteral (&Names)[N],
          T Default) {
  if (S)
    for (size_t I = 0; I < N; ++I)
      if (*S == Names[I])
        return T(I);
  return Default;
}
} // namespace

/// A scalar's facts as written; the comparison that proved a count stays
/// behind (notes name it only in its own TU).
static llvm::json::Object scalarToJSON(const ScalarFacts &F) {
  llvm::json::Object S;
  if (F.Known)
    S["known"] = *F.Known;
  if (F.IsDeviceCount) {
    S["deviceCount"] = true;
    if (!F.OrKnown.empty())
      S["orKnown"] = llvm::json::Array(F.OrKnown);
  }
  auto Implied = [](const Implication &I) {
    return llvm::json::Object{{"cuda", I.Cuda}, {"count", I.CountAtLeast}};
  };
  if (!F.IfTrue.empty())
    S["ifTrue"] = Implied(F.IfTrue);
  if (!F.IfFalse.empty())
    S["ifFalse"] = Implied(F.IfFalse);
  return S;
}

static ScalarFacts scalarFromJSON(const llvm::json::Object &S) {
  ScalarFacts F;
  if (std::optional<int64_t> K = S.getInteger("known"))
    F.Known = *K;
  F.IsDeviceCount = S.getBoolean("deviceCount").value_or(false);
  if (const llvm::json::Array *Or = S.getArray("orKnown"))
    for (const llvm::json::Value &V : *Or)
      if (std::optional<int64_t> K = V.getAsInteger())
        F.OrKnown.push_back(*K);
  auto Implied = [](const llvm::json::Object *I) {
    Implication Out;
    if (I) {
      Out.Cuda = I->getBoolean("cuda").value_or(false);
      Out.CountAtLeast = I->getInteger("count").value_or(0);
    }
    return Out;
  };
  F.IfTrue = Implied(S.getObject("ifTrue"));
  F.IfFalse = Implied(S.getObject("ifFalse"));
  return F;
}

//===--- Writing -----------------------------------------------------------===//

llvm::json::Value FactWriter::place(SourceLocation Loc) const {
  if (Loc.isInvalid())
    return nullptr;
  PresumedLoc P = SM.getPresumedLoc(SM.getExpansionLoc(Loc));
  if (P.isInvalid())
    return nullptr;
  // Relative to the compile command's directory, which the TU's file
  // system has as its working directory.
  llvm::SmallString<256> Path(P.getFilename());
  SM.getFileManager().makeAbsolutePath(Path);
  llvm::sys::path::remove_dots(Path, /*remove_dot_dot=*/true);
  return llvm::json::Object{{"file", std::string(Path)},
                            {"line", int64_t(P.getLine())},
                            {"column", int64_t(P.getColumn())}};
}

llvm::json::Array FactWriter::path(const CallStep *Via) const {
  llvm::json::Array Out;
  for (const CallStep *S = Via; S; S = S->Next) {
    llvm::json::Value Where = place(S->Call);
    if (auto *O = Where.getAsObject())
      (*O)["callee"] = S->Callee.str();
    Out.push_back(std::move(Where));
  }
  return Out;
}

llvm::json::Value FactWriter::entry(const ValueDecl *D) const {
  if (!D)
    return nullptr;
  if (const auto *P = dyn_cast<ParmVarDecl>(D))
    return llvm::json::Object{{"param", int64_t(P->getFunctionScopeIndex())}};
  if (const auto *Field = dyn_cast<FieldDecl>(D))
    return llvm::json::Object{{"field", Field->getName().str()}};
  if (const auto *Var = dyn_cast<VarDecl>(D); Var && Var->hasGlobalStorage())
    return llvm::json::Object{{"global", usrOf(*Var)}};
  return nullptr; // a captured local: only its own TU names it
}

template <typename T, size_t N>
static void writeSourced(llvm::json::Object &Out, llvm::StringRef Name,
                         const Sourced<T> &S, const llvm::StringLiteral (&Names)[N],
                         const FactWriter &W) {
  if (!S.isKnown() && !S.Entry)
    return;
  llvm::json::Object O{{"value", nameOf(S.Value, Names)}};
  if (S.Entry)
    O["entry"] = W.entry(S.Entry);
  O["origin"] = W.place(S.Origin);
  if (S.Via)
    O["via"] = W.path(S.Via);
  Out[Name] = std::move(O);
}

llvm::json::Object FactWriter::facts(const ValueFacts &V) const {
  llvm::json::Object O;
  if (V.Device.isKnown() || V.Device.Entry) {
    llvm::json::Object D;
    const DeviceValue &Dev = V.Device.Value;
    switch (Dev.kind()) {
    case DeviceValue::Kind::Unknown:
      D["kind"] = "unknown";
      break;
    case DeviceValue::Kind::CPU:
      D["kind"] = "cpu";
      break;
    case DeviceValue::Kind::CUDA:
      D["kind"] = "cuda";
      D["ordinal"] = int64_t(Dev.ordinal());
      break;
    case DeviceValue::Kind::Other:
      D["kind"] = "other";
      break;
    case DeviceValue::Kind::Symbolic:
      if (const auto *P = dyn_cast<ParmVarDecl>(Dev.holder());
          P && F && P->getDeclContext() == F) {
        D["kind"] = "symbolic-param";
        D["holderParam"] = int64_t(P->getFunctionScopeIndex());
      } else {
        D["kind"] = "symbolic";
        D["holder"] = usrOf(*Dev.holder());
      }
      break;
    }
    if (V.Device.Entry)
      D["entry"] = entry(V.Device.Entry);
    D["origin"] = place(V.Device.Origin);
    if (V.Device.Via)
      D["via"] = path(V.Device.Via);
    O["device"] = std::move(D);
  }
  writeSourced(O, "pin", V.Pin, PinNames, *this);
  writeSourced(O, "graph", V.Graph, GraphNames, *this);
  writeSourced(O, "mode", V.Mode, ModeNames, *this);
  if (V.ModeLayers != Tri::Unknown)
    O["modeLayers"] = nameOf(V.ModeLayers, TriNames);
  if (V.HasParameters != Tri::Unknown)
    O["hasParameters"] = nameOf(V.HasParameters, TriNames);
  if (V.PendingCopy.isValid()) {
    O["pending"] = place(V.PendingCopy);
    if (V.PendingVia)
      O["pendingVia"] = path(V.PendingVia);
  }
  if (!V.MayBeZeroDim)
    O["zeroDim"] = false;
  if (V.DeviceUnset)
    O["deviceUnset"] = true;
  if (!V.Scalar.empty())
    O["scalar"] = scalarToJSON(V.Scalar);
  if (!V.Callables.empty()) {
    std::vector<std::string> USRs;
    for (const FunctionDecl *F : V.Callables)
      USRs.push_back(usrOf(*F));
    llvm::sort(USRs);
    O["callables"] = llvm::json::Array(USRs);
    if (V.CallablesKnown)
      O["callablesKnown"] = true;
  }
  return O;
}

//===--- Joining written facts --------------------------------------------===//

llvm::json::Object joinFactObjects(const llvm::json::Object &Mine,
                                   const llvm::json::Object &Theirs) {
  auto SameField = [](const llvm::json::Object &A, const llvm::json::Object &B,
                      llvm::StringRef Field) {
    const llvm::json::Value *FA = A.get(Field), *FB = B.get(Field);
    return (!FA && !FB) || (FA && FB && *FA == *FB);
  };
  llvm::json::Object Joined;
  for (const auto &[Key, Value] : Mine) {
    const llvm::json::Value *Other = Theirs.get(Key);
    if (!Other)
      continue;
    // Sourced facts are equal when their value and entry are; their origin
    // may differ.
    const llvm::json::Object *A = Value.getAsObject();
    const llvm::json::Object *B = Other->getAsObject();
    if (Key == "scalar" && A && B) {
      llvm::json::Object Scalar =
          scalarToJSON(joinScalars(scalarFromJSON(*A), scalarFromJSON(*B)));
      if (!Scalar.empty())
        Joined.try_emplace(Key, std::move(Scalar));
      continue;
    }
    bool Same;
    if (A && B && A->get("value") && B->get("value"))
      Same = SameField(*A, *B, "value") && SameField(*A, *B, "entry");
    else if (A && B && A->get("kind") && B->get("kind"))
      Same = SameField(*A, *B, "kind") && SameField(*A, *B, "ordinal") &&
             SameField(*A, *B, "holder") && SameField(*A, *B, "entry");
    else
      Same = Value == *Other;
    if (Same)
      Joined.try_emplace(Key, Value);
  }
  return Joined;
}

llvm::json::Object FactWriter::pathFacts(const PathFacts &P) const {
  return llvm::json::Object{{"cuda", nameOf(P.Cuda, CudaNames)},
                            {"grad", nameOf(P.Grad, GradNames)},
                            {"count", P.CountAtLeast}};
}

llvm::json::Object FactWriter::loop(const LoopContext &L) const {
  llvm::json::Object O;
  if (L.TrainingLoop.isValid()) {
    O["training"] = place(L.TrainingLoop);
    O["trainingCall"] = place(L.TrainingCall);
    O["trainingCallee"] = L.TrainingCallee.str();
  }
  if (L.Loop.isValid()) {
    O["loop"] = place(L.Loop);
    O["withoutBackward"] = L.LoopWithoutBackward;
  }
  if (L.EveryCall)
    O["everyCall"] = true;
  return O;
}

llvm::json::Value FactWriter::location(const Location &L) const {
  llvm::json::Object O;
  switch (L.Kind) {
  case Location::Local:
    if (const auto *P = dyn_cast_or_null<ParmVarDecl>(L.Root)) {
      O["root"] = "param";
      O["index"] = int64_t(P->getFunctionScopeIndex());
      break;
    }
    return nullptr;
  case Location::This:
    O["root"] = "this";
    break;
  case Location::Global:
    O["root"] = "global";
    O["usr"] = usrOf(*L.Root);
    break;
  case Location::Return:
    O["root"] = "return";
    break;
  default:
    return nullptr;
  }
  llvm::json::Array Path;
  for (unsigned I = 0; I < L.Depth; ++I) {
    Selector S = Selector::fromRaw(L.Path[I]);
    if (const FieldDecl *Field = S.asField())
      Path.push_back(llvm::json::Object{{"field", Field->getName().str()}});
    else if (S.isElement())
      Path.push_back(llvm::json::Object{{"element", true}});
    else
      Path.push_back(llvm::json::Object{{"tuple", int64_t(S.tupleIndex())}});
  }
  O["path"] = std::move(Path);
  return O;
}

llvm::json::Object FactWriter::obligation(const Obligation &Ob) const {
  llvm::json::Array Operands;
  for (const Operand &Op : Ob.Site.Operands)
    Operands.push_back(
        llvm::json::Object{{"facts", facts(Op.Facts)}, {"name", Op.Name}});
  llvm::json::Object O{{"kind", Ob.Kind->name().str()},
                       {"operands", std::move(Operands)},
                       {"what", Ob.Site.What},
                       {"flags", int64_t(Ob.Site.Flags)},
                       {"path", pathFacts(Ob.Context.Path)},
                       {"loop", loop(Ob.Context.Loop)},
                       {"at", place(Ob.At)}};
  if (Ob.Via)
    O["via"] = path(Ob.Via);
  return O;
}

llvm::json::Object FactWriter::summary(const FunctionSummary &S) const {
  auto Effects = [&](const std::vector<SummaryEffect> &List) {
    llvm::json::Array Out;
    for (const SummaryEffect &E : List) {
      llvm::json::Value Where = location(E.Where);
      if (Where.kind() != llvm::json::Value::Null)
        Out.push_back(llvm::json::Object{{"at", std::move(Where)},
                                         {"facts", facts(E.Exit)}});
    }
    return Out;
  };
  llvm::json::Array Clobbers, Obligations;
  for (const Location &L : S.Clobbers) {
    llvm::json::Value Where = location(L);
    if (Where.kind() != llvm::json::Value::Null)
      Clobbers.push_back(std::move(Where));
  }
  for (const Obligation &O : S.Obligations)
    Obligations.push_back(obligation(O));
  return llvm::json::Object{
      {"name", F ? F->getQualifiedNameAsString() : ""},
      {"known", S.Known},
      {"returns", Effects(S.Returns)},
      {"effects", Effects(S.Effects)},
      {"clobbers", std::move(Clobbers)},
      {"exitGrad", nameOf(S.ExitGrad, GradNames)},
      {"obligations", std::move(Obligations)},
      {"backward", place(S.Backward)},
      {"step", place(S.Step)},
      {"trainsPerCall", S.TrainsPerCall},
      {"maySynchronize", S.MaySynchronize},
      {"mayRunOpaqueBackward", S.MayRunOpaqueBackward}};
}

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
      if (const NamedDecl *Holder =
              Program.declarationOf(D->getString("holder").value_or("")))
        V.Device.Value = DeviceValue::symbolic(Holder);
    }
    V.Device.Entry = entry(D->get("entry"));
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
  V.PendingCopy = place(O->get("pending"));
  V.PendingVia = path(O->getArray("pendingVia"));
  V.MayBeZeroDim = O->getBoolean("zeroDim").value_or(true);
  V.DeviceUnset = O->getBoolean("deviceUnset").value_or(false);
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
  S.TrainsPerCall = O.getBoolean("trainsPerCall").value_or(false);
  // A backward or a step the reading TU cannot locate still runs.
  const llvm::json::Value *Backward = O.get("backward");
  const llvm::json::Value *Step = O.get("step");
  if (S.Backward.isInvalid() && Backward && Backward->getAsObject())
    S.Backward = F ? F->getLocation() : SourceLocation();
  if (S.Step.isInvalid() && Step && Step->getAsObject())
    S.Step = F ? F->getLocation() : SourceLocation();
  S.MaySynchronize = O.getBoolean("maySynchronize").value_or(true);
  S.MayRunOpaqueBackward = O.getBoolean("mayRunOpaqueBackward").value_or(true);
  return S;
}

} // namespace clang::tidy::torch
