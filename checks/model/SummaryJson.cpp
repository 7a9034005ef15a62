//===--- SummaryJson.cpp - torch-tidy -------------------------------------===//
//
// The exported summaries, version 1:
//
//   {"version": 1,
//    "functions": {USR: {"name", "known", "return": FACTS, "effects": [...],
//                        "requirements": [...], "backward": LOC, "step": LOC,
//                        "maySynchronize", "mayRunOpaqueBackward"}},
//    "calls": [{"callee": USR, "caller": USR, "cudaGuarded", "gradDisabled"}],
//    "addressTaken": [USR],
//    "reads": {"summaries": [USR], "entries": [USR]},
//    "entries": {USR: {"cudaGuarded", "gradDisabled"}}}
//
// FACTS = {"device": {"kind", "ordinal", "param", "holder", "origin", "via"},
//          "pin": {...}, "graph": {...}, "zeroDim"}; a place is
// {"file", "line", "column"}; "via" lists the calls outermost first. A
// parameter is named by its index; a symbolic device's holder by its USR
// (a holder that the reading TU does not declare makes the device unknown).
//
//===----------------------------------------------------------------------===//

#include "ExternalSummaries.h"
#include "ProgramModel.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Index/USRGeneration.h"
#include "model/UserCodeTraversal.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace clang::tidy::torch {

std::string usrOf(const Decl &D) {
  llvm::SmallString<128> Buf;
  if (index::generateUSRForDecl(&D, Buf))
    return "";
  return std::string(Buf);
}

//===--- Writing ----------------------------------------------------------===//

namespace {

class Writer {
public:
  Writer(const FunctionDecl &F, const SourceManager &SM) : F(F), SM(SM) {}

  llvm::json::Value place(SourceLocation Loc) const {
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

  llvm::json::Array path(const CallStep *Via) const {
    llvm::json::Array Out;
    for (const CallStep *S = Via; S; S = S->Next) {
      llvm::json::Value Where = place(S->Call);
      if (auto *O = Where.getAsObject())
        (*O)["callee"] = S->Callee.str();
      Out.push_back(std::move(Where));
    }
    return Out;
  }

  std::optional<int64_t> paramIndex(const ParmVarDecl *P) const {
    if (!P)
      return std::nullopt;
    return int64_t(P->getFunctionScopeIndex());
  }

  template <typename T>
  void common(llvm::json::Object &O, const Sourced<T> &S) const {
    if (std::optional<int64_t> I = paramIndex(S.Param))
      O["param"] = *I;
    O["origin"] = place(S.Origin);
    if (S.Via)
      O["via"] = path(S.Via);
  }

  llvm::json::Object device(const Sourced<DeviceValue> &D) const {
    llvm::json::Object O;
    const DeviceValue &V = D.Value;
    switch (V.kind()) {
    case DeviceValue::Kind::Unknown:
      O["kind"] = "unknown";
      break;
    case DeviceValue::Kind::CPU:
      O["kind"] = "cpu";
      break;
    case DeviceValue::Kind::CUDA:
      O["kind"] = "cuda";
      O["ordinal"] = int64_t(V.ordinal());
      break;
    case DeviceValue::Kind::Other:
      O["kind"] = "other";
      break;
    case DeviceValue::Kind::Symbolic:
      if (const auto *P = dyn_cast<ParmVarDecl>(V.holder());
          P && P->getDeclContext() == &F) {
        O["kind"] = "symbolic-param";
        O["holderParam"] = int64_t(P->getFunctionScopeIndex());
      } else {
        O["kind"] = "symbolic";
        O["holder"] = usrOf(*V.holder());
      }
      break;
    }
    common(O, D);
    return O;
  }

  template <typename T>
  llvm::json::Object state(const Sourced<T> &S, llvm::StringRef Name) const {
    llvm::json::Object O{{"value", Name}};
    common(O, S);
    return O;
  }

  llvm::json::Object facts(const ValueFacts &V) const {
    static const char *Pins[] = {"unknown", "pinned", "pageable"};
    static const char *Graphs[] = {"unknown", "graph", "no-graph"};
    return llvm::json::Object{
        {"device", device(V.Device)},
        {"pin", state(V.Pin, Pins[unsigned(V.Pin.Value)])},
        {"graph", state(V.Graph, Graphs[unsigned(V.Graph.Value)])},
        {"zeroDim", V.MayBeZeroDim}};
  }

  llvm::json::Object operand(const RequiredOperand &Op) const {
    return llvm::json::Object{{"device", device(Op.Device)},
                              {"name", Op.Name},
                              {"zeroDim", Op.MayBeZeroDim}};
  }

  llvm::json::Object summary(const FunctionSummary &S) const {
    llvm::json::Array Effects, Requirements;
    for (const SummaryEffect &E : S.Effects) {
      llvm::json::Object O{{"exit", facts(E.Exit)}};
      if (E.Param)
        O["param"] = int64_t(E.Param->getFunctionScopeIndex());
      else
        O["field"] = E.Field->getName().str();
      Effects.push_back(std::move(O));
    }
    for (const Requirement &R : S.Requirements) {
      llvm::json::Object O{
          {"kind", R.Kind == Requirement::SameDevice ? "same-device"
                                                      : "pinned-source"},
          {"first", operand(R.First)},
          {"second", operand(R.Second)},
          {"what", R.What},
          {"module", R.IsModuleCall},
          {"zeroDimCPU", R.AllowsZeroDimCPU},
          {"at", place(R.At)}};
      if (std::optional<int64_t> I = paramIndex(R.Source))
        O["source"] = *I;
      if (R.Via)
        O["via"] = path(R.Via);
      Requirements.push_back(std::move(O));
    }
    return llvm::json::Object{{"name", F.getQualifiedNameAsString()},
                              {"known", S.Known},
                              {"return", facts(S.Return)},
                              {"effects", std::move(Effects)},
                              {"requirements", std::move(Requirements)},
                              {"backward", place(S.Backward)},
                              {"step", place(S.Step)},
                              {"maySynchronize", S.MaySynchronize},
                              {"mayRunOpaqueBackward", S.MayRunOpaqueBackward}};
  }

private:
  const FunctionDecl &F;
  const SourceManager &SM;
};

//===--- Reading ----------------------------------------------------------===//

/// Rebuilds a summary against the reading TU's declaration of the callee.
class Reader {
public:
  Reader(const FunctionDecl &F, ProgramModel &Program)
      : F(F), Program(Program), Ctx(Program.context()) {}

  SourceLocation place(const llvm::json::Value *V) const {
    const llvm::json::Object *O = V ? V->getAsObject() : nullptr;
    if (!O)
      return {};
    std::optional<llvm::StringRef> File = O->getString("file");
    std::optional<int64_t> Line = O->getInteger("line");
    std::optional<int64_t> Column = O->getInteger("column");
    if (!File || !Line || !Column || *Line <= 0 || *Column <= 0)
      return {};
    SourceManager &SM = Ctx.getSourceManager();
    llvm::Expected<FileEntryRef> Entry =
        SM.getFileManager().getFileRef(*File);
    if (!Entry) {
      llvm::consumeError(Entry.takeError());
      return {};
    }
    FileID FID = SM.getOrCreateFileID(*Entry, SrcMgr::C_User);
    return SM.translateLineCol(FID, unsigned(*Line), unsigned(*Column));
  }

  const CallStep *path(const llvm::json::Array *Steps) const {
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

  const ParmVarDecl *param(std::optional<int64_t> I) const {
    if (!I || *I < 0 || unsigned(*I) >= F.getNumParams())
      return nullptr;
    return F.getParamDecl(unsigned(*I));
  }

  template <typename T>
  void common(Sourced<T> &S, const llvm::json::Object &O) const {
    S.Param = param(O.getInteger("param"));
    S.Origin = place(O.get("origin"));
    S.Via = path(O.getArray("via"));
  }

  Sourced<DeviceValue> device(const llvm::json::Object *O) const {
    Sourced<DeviceValue> D;
    if (!O)
      return D;
    llvm::StringRef Kind = O->getString("kind").value_or("unknown");
    if (Kind == "cpu")
      D.Value = DeviceValue::cpu();
    else if (Kind == "cuda")
      D.Value = DeviceValue::cuda(int(O->getInteger("ordinal").value_or(-1)));
    else if (Kind == "other")
      D.Value = DeviceValue::other();
    else if (Kind == "symbolic-param") {
      if (const ParmVarDecl *P = param(O->getInteger("holderParam")))
        D.Value = DeviceValue::symbolic(P);
    } else if (Kind == "symbolic") {
      if (const NamedDecl *Holder =
              Program.declarationOf(O->getString("holder").value_or("")))
        D.Value = DeviceValue::symbolic(Holder);
    }
    common(D, *O);
    // A fact this TU cannot name is unknown, and has no origin to show.
    if (!D.Value.isKnown() && !D.Param)
      return {};
    return D;
  }

  template <typename T>
  Sourced<T> state(const llvm::json::Object *O,
                   llvm::ArrayRef<llvm::StringRef> Names) const {
    Sourced<T> S;
    if (!O)
      return S;
    llvm::StringRef V = O->getString("value").value_or("unknown");
    for (size_t I = 0; I < Names.size(); ++I)
      if (Names[I] == V)
        S.Value = T(I);
    common(S, *O);
    if (S.Value == T() && !S.Param)
      return {};
    return S;
  }

  ValueFacts facts(const llvm::json::Object *O) const {
    ValueFacts V;
    if (!O)
      return V;
    V.Device = device(O->getObject("device"));
    V.Pin = state<Pinning>(O->getObject("pin"),
                           {"unknown", "pinned", "pageable"});
    V.Graph = state<GraphState>(O->getObject("graph"),
                                {"unknown", "graph", "no-graph"});
    V.MayBeZeroDim = O->getBoolean("zeroDim").value_or(true);
    return V;
  }

  RequiredOperand operand(const llvm::json::Object *O) const {
    RequiredOperand R;
    if (!O)
      return R;
    R.Device = device(O->getObject("device"));
    R.Name = O->getString("name").value_or("operand").str();
    R.MayBeZeroDim = O->getBoolean("zeroDim").value_or(true);
    return R;
  }

  std::optional<FunctionSummary> summary(const llvm::json::Object &O) const {
    if (!O.getBoolean("known").value_or(false))
      return std::nullopt;
    FunctionSummary S;
    S.Known = true;
    S.Return = facts(O.getObject("return"));
    const auto *Method = dyn_cast<CXXMethodDecl>(&F);
    if (const llvm::json::Array *Effects = O.getArray("effects"))
      for (const llvm::json::Value &V : *Effects) {
        const llvm::json::Object *E = V.getAsObject();
        if (!E)
          continue;
        SummaryEffect Effect;
        Effect.Exit = facts(E->getObject("exit"));
        if (std::optional<int64_t> I = E->getInteger("param")) {
          Effect.Param = param(I);
          if (!Effect.Param)
            continue;
        } else if (std::optional<llvm::StringRef> Name =
                       E->getString("field")) {
          if (!Method)
            continue;
          for (const FieldDecl *Field : Method->getParent()->fields())
            if (Field->getName() == *Name)
              Effect.Field = Field;
          if (!Effect.Field)
            continue;
        }
        S.Effects.push_back(std::move(Effect));
      }
    if (const llvm::json::Array *Requirements = O.getArray("requirements"))
      for (const llvm::json::Value &V : *Requirements) {
        const llvm::json::Object *R = V.getAsObject();
        if (!R)
          continue;
        Requirement Req;
        Req.Kind = R->getString("kind") == "pinned-source"
                       ? Requirement::PinnedSource
                       : Requirement::SameDevice;
        Req.First = operand(R->getObject("first"));
        Req.Second = operand(R->getObject("second"));
        Req.What = R->getString("what").value_or("").str();
        Req.IsModuleCall = R->getBoolean("module").value_or(false);
        Req.AllowsZeroDimCPU = R->getBoolean("zeroDimCPU").value_or(true);
        Req.Source = param(R->getInteger("source"));
        Req.At = place(R->get("at"));
        Req.Via = path(R->getArray("via"));
        if (Req.Kind == Requirement::PinnedSource && !Req.Source)
          continue;
        S.Requirements.push_back(std::move(Req));
      }
    S.Backward = place(O.get("backward"));
    S.Step = place(O.get("step"));
    // A backward the reading TU cannot locate still runs.
    if (S.Backward.isInvalid() && O.getObject("backward"))
      S.MayRunOpaqueBackward = true;
    S.MaySynchronize = O.getBoolean("maySynchronize").value_or(true);
    S.MayRunOpaqueBackward |=
        O.getBoolean("mayRunOpaqueBackward").value_or(true);
    return S;
  }

private:
  const FunctionDecl &F;
  ProgramModel &Program;
  ASTContext &Ctx;
};

} // namespace

//===--- ExternalSummaries ------------------------------------------------===//

llvm::Error ExternalSummaries::merge(const llvm::json::Object &Document) {
  std::optional<int64_t> Version = Document.getInteger("version");
  if (Version != SummaryFormatVersion)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "summary format version %lld is not the supported version %d",
        static_cast<long long>(Version.value_or(0)), SummaryFormatVersion);
  if (const llvm::json::Object *Fs = Document.getObject("functions"))
    for (const auto &[USR, V] : *Fs)
      if (const llvm::json::Object *O = V.getAsObject()) {
        auto [It, New] = Functions.try_emplace(USR.str(), *O);
        // Two programs of one database may each define a `train(Net&)`:
        // different definitions of one USR are nobody's facts.
        if (!New && It->second != *O)
          Conflicting.insert(USR.str());
      }
  if (const llvm::json::Object *Es = Document.getObject("entries"))
    for (const auto &[USR, V] : *Es)
      if (const llvm::json::Object *O = V.getAsObject())
        Entries.try_emplace(USR.str(),
                            EntryContext{O->getBoolean("cudaGuarded").value_or(false),
                                         O->getBoolean("gradDisabled").value_or(false)});
  return llvm::Error::success();
}

llvm::Error ExternalSummaries::addExport(const llvm::json::Object &Export) {
  if (llvm::Error E = merge(Export))
    return E;
  if (const llvm::json::Array *Cs = Export.getArray("calls"))
    for (const llvm::json::Value &V : *Cs)
      if (const llvm::json::Object *O = V.getAsObject())
        Calls.push_back({O->getString("callee").value_or("").str(),
                         O->getString("caller").value_or("").str(),
                         O->getBoolean("cudaGuarded").value_or(false),
                         O->getBoolean("gradDisabled").value_or(false)});
  if (const llvm::json::Array *As = Export.getArray("addressTaken"))
    for (const llvm::json::Value &V : *As)
      if (std::optional<llvm::StringRef> U = V.getAsString())
        AddressTaken.insert(*U);
  return llvm::Error::success();
}

void ExternalSummaries::finishEntries() {
  // Start from "every called function is guarded" and take back what a
  // call proves otherwise, until nothing changes.
  for (const auto &USR : Conflicting)
    Functions.erase(USR.getKey());
  llvm::StringMap<EntryContext> Next;
  for (const Call &C : Calls)
    if (!C.Callee.empty() && !AddressTaken.contains(C.Callee) &&
        !Conflicting.contains(C.Callee))
      Next[C.Callee] = {true, true};
  for (const Call &C : Calls)
    if (AddressTaken.contains(C.Callee))
      Next.erase(C.Callee);
  for (bool Changed = true; Changed;) {
    Changed = false;
    for (const Call &C : Calls) {
      auto It = Next.find(C.Callee);
      if (It == Next.end())
        continue;
      auto Caller = Next.find(C.Caller);
      bool CallerCuda = Caller != Next.end() && Caller->second.CudaGuarded;
      bool CallerGrad = Caller != Next.end() && Caller->second.GradDisabled;
      EntryContext &E = It->second;
      if (E.CudaGuarded && !C.CudaGuarded && !CallerCuda) {
        E.CudaGuarded = false;
        Changed = true;
      }
      if (E.GradDisabled && !C.GradDisabled && !CallerGrad) {
        E.GradDisabled = false;
        Changed = true;
      }
    }
  }
  for (auto &E : Next)
    if (E.second.CudaGuarded || E.second.GradDisabled)
      Entries[E.getKey()] = E.second;
}

llvm::Expected<std::shared_ptr<ExternalSummaries>>
ExternalSummaries::parse(llvm::StringRef Text) {
  llvm::Expected<llvm::json::Value> V = llvm::json::parse(Text);
  if (!V)
    return V.takeError();
  const llvm::json::Object *O = V->getAsObject();
  if (!O)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "not a JSON object");
  auto S = std::make_shared<ExternalSummaries>();
  if (llvm::Error E = S->merge(*O))
    return std::move(E);
  return S;
}

llvm::Expected<std::shared_ptr<ExternalSummaries>>
ExternalSummaries::load(llvm::StringRef Path) {
  llvm::SmallString<256> File(Path);
  if (llvm::sys::fs::is_directory(Path))
    llvm::sys::path::append(File, "summaries.json");
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> Buffer =
      llvm::MemoryBuffer::getFile(File);
  if (!Buffer)
    return llvm::createStringError(Buffer.getError(), "cannot read '%s': %s",
                                   File.c_str(),
                                   Buffer.getError().message().c_str());
  llvm::Expected<std::shared_ptr<ExternalSummaries>> S =
      parse((*Buffer)->getBuffer());
  if (!S)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "'%s' is not a torch-tidy summary file: %s",
                                   File.c_str(),
                                   llvm::toString(S.takeError()).c_str());
  return S;
}

std::optional<FunctionSummary>
ExternalSummaries::lookup(const FunctionDecl &F, ProgramModel &Program) const {
  auto It = Functions.find(usrOf(F));
  if (It == Functions.end())
    return std::nullopt;
  return Reader(F, Program).summary(It->second);
}

std::optional<EntryContext> ExternalSummaries::entry(llvm::StringRef USR) const {
  auto It = Entries.find(USR);
  if (It == Entries.end())
    return std::nullopt;
  return It->second;
}

llvm::json::Object ExternalSummaries::toJSON() const {
  // Sorted, so that the file is the same bytes however it was merged.
  std::vector<llvm::StringRef> Names;
  for (const auto &F : Functions)
    Names.push_back(F.getKey());
  llvm::sort(Names);
  llvm::json::Object Fs, Es;
  for (llvm::StringRef N : Names)
    Fs[N] = llvm::json::Object(Functions.find(N)->second);
  Names.clear();
  for (const auto &E : Entries)
    Names.push_back(E.getKey());
  llvm::sort(Names);
  for (llvm::StringRef N : Names) {
    const EntryContext &E = Entries.find(N)->second;
    Es[N] = llvm::json::Object{{"cudaGuarded", E.CudaGuarded},
                               {"gradDisabled", E.GradDisabled}};
  }
  return llvm::json::Object{{"version", SummaryFormatVersion},
                            {"functions", std::move(Fs)},
                            {"entries", std::move(Es)}};
}

std::string ExternalSummaries::digestOf(llvm::ArrayRef<std::string> USRs) const {
  llvm::SHA256 Hash;
  for (const std::string &U : USRs) {
    Hash.update(U);
    auto F = Functions.find(U);
    if (F != Functions.end())
      Hash.update(llvm::formatv("{0}", llvm::json::Value(
                                           llvm::json::Object(F->second)))
                      .str());
    auto E = Entries.find(U);
    if (E != Entries.end())
      Hash.update(llvm::formatv("{0}{1}", E->second.CudaGuarded,
                                E->second.GradDisabled)
                      .str());
  }
  return llvm::toHex(Hash.result(), /*LowerCase=*/true);
}

llvm::json::Object serializeSummary(const FunctionDecl &F,
                                    const FunctionSummary &S,
                                    const SourceManager &SM) {
  return Writer(F, SM).summary(S);
}

} // namespace clang::tidy::torch
