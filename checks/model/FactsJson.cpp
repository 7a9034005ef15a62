//===--- FactsJson.cpp - torch-tidy ---------------------------------------===//
//
//   FACTS   = {"device": SOURCED, "pin": SOURCED, "graph": SOURCED,
//              "mode": SOURCED, "modeLayers", "hasParameters", "meanLoss",
//              "halfAutocast": PLACE,
//              "pending", "pendingIf": ENTRY, "conflictIf": ENTRY, "zeroDim", "deviceUnset", "keepsCallerFacts", "scalar", "callable"}
//   SOURCED = {"value", "entry": ENTRY, "origin": PLACE, "via": [STEP]}
//   DEVICE  = SOURCED with "kind", "ordinal", "holder": USR, "described"
//   ENTRY   = {"param": N} | {"field": NAME} | {"global": USR}
//   PLACE   = {"file", "line", "column"}, STEP = PLACE + {"callee"}
//   LOC     = {"root": "param"|"this"|"global"|"return", ..., "path": [SEL]}
//
// Only facts that differ from "unknown" are written.
//
//===----------------------------------------------------------------------===//

#include "FactsJson.h"
#include "FactsJsonNames.h"
#include "ExternalSummaries.h"
#include "ProgramModel.h"
#include "clang/AST/DeclCXX.h"
#include "llvm/Support/Path.h"

namespace clang::tidy::torch {

using namespace factsjson;

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
  if (S.Entry && S.AlsoEntry)
    O["alsoEntry"] = W.entry(S.AlsoEntry);
  if (S.Otherwise != T())
    O["otherwise"] = nameOf(S.Otherwise, Names);
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
      if (const auto *P = dyn_cast_or_null<ParmVarDecl>(Dev.holder());
          P && F && P->getDeclContext() == F) {
        D["kind"] = "symbolic-param";
        D["holderParam"] = int64_t(P->getFunctionScopeIndex());
      } else {
        D["kind"] = "symbolic";
        if (Dev.holder())
          D["holder"] = usrOf(*Dev.holder());
        // For a TU that cannot name the holder.
        D["described"] = Dev.describe();
      }
      break;
    }
    if (V.Device.Entry)
      D["entry"] = entry(V.Device.Entry);
    if (V.Device.AlsoEntry)
      D["alsoEntry"] = entry(V.Device.AlsoEntry);
    if (V.Device.EitherEntry)
      D["eitherEntry"] = true;
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
  if (V.MeanLoss != Tri::Unknown)
    O["meanLoss"] = nameOf(V.MeanLoss, TriNames);
  if (V.HalfAutocast.isValid())
    O["halfAutocast"] = place(V.HalfAutocast);
  if (V.PendingCopy.isValid()) {
    O["pending"] = place(V.PendingCopy);
    if (V.PendingVia)
      O["pendingVia"] = path(V.PendingVia);
    if (V.PendingIf)
      O["pendingIf"] = entry(V.PendingIf);
  }
  if (V.ConvertedCopy.isValid()) {
    O["converted"] = place(V.ConvertedCopy);
    if (V.ConvertedVia)
      O["convertedVia"] = path(V.ConvertedVia);
  }
  if (V.OrdinalSpelled.isValid()) {
    O["ordinal"] = V.SpelledOrdinal;
    O["ordinalAt"] = place(V.OrdinalSpelled);
  }
  if (V.MinDims)
    O["minDims"] = V.MinDims;
  if (V.FromDeviceConflict)
    O["deviceConflict"] = true;
  if (V.ConflictIf)
    O["conflictIf"] = entry(V.ConflictIf);
  if (V.DeviceUnset)
    O["deviceUnset"] = true;
  if (V.KeepsCallerFacts)
    O["keepsCallerFacts"] = true;
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
  llvm::json::Object O{{"cuda", nameOf(P.Cuda, CudaNames)},
                       {"grad", nameOf(P.Grad, GradNames)},
                       {"count", P.CountAtLeast}};
  // An unchecked CUDA selection already made on the path: a later one is
  // the same path's.
  if (P.CudaSelectedBefore ||
      llvm::any_of(P.UncheckedCuda, [](const auto &U) {
        return U.second == CudaGuard::Unguarded;
      }))
    O["selected"] = true;
  // One made where the callers decide: the same, when they did not check.
  else if (llvm::any_of(P.UncheckedCuda, [](const auto &U) {
             return U.second == CudaGuard::Entry;
           }))
    O["selectedIfUnchecked"] = true;
  return O;
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
  for (const Operand &Op : Ob.Site.Operands) {
    llvm::json::Object X{{"facts", facts(Op.Facts)}, {"name", Op.Name}};
    // A part of a parameter is instantiated from the caller's part.
    if (Op.isPart())
      if (llvm::json::Value Where = location(Op.Storage);
          Where.kind() != llvm::json::Value::Null)
        X["storage"] = std::move(Where);
    Operands.push_back(std::move(X));
  }
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
  llvm::json::Value BackwardEntries = nullptr;
  if (S.BackwardEntriesKnown) {
    llvm::json::Array Entries;
    for (const ValueDecl *D : S.BackwardEntries)
      Entries.push_back(entry(D));
    BackwardEntries = std::move(Entries);
  }
  llvm::json::Value ReturnedStorage = nullptr;
  if (S.ReturnedStorage)
    ReturnedStorage = location(S.ReturnedStorage);
  return llvm::json::Object{
      {"name", F ? F->getQualifiedNameAsString() : ""},
      {"known", S.Known},
      {"returns", Effects(S.Returns)},
      {"returnedStorage", std::move(ReturnedStorage)},
      {"effects", Effects(S.Effects)},
      {"clobbers", std::move(Clobbers)},
      {"exitGrad", nameOf(S.ExitGrad, GradNames)},
      {"obligations", std::move(Obligations)},
      {"backward", place(S.Backward)},
      {"step", place(S.Step)},
      {"backwardEntries", std::move(BackwardEntries)},
      {"trainsPerCall", S.TrainsPerCall},
      {"selectsCuda", S.SelectsCuda},
      {"maySynchronize", S.MaySynchronize},
      {"resetsGradients", S.ResetsGradients},
      {"settlesGradients", S.SettlesGradients},
      {"rescalesGradients", S.RescalesGradients},
      {"stepWithoutReset", place(S.StepWithoutReset)},
      {"stepRun", place(S.StepRun)},
      {"backwardNotStepped", place(S.BackwardNotStepped)},
      {"countsIterations", S.CountsIterations},
      {"autocastAtExit", nameOf(S.AutocastAtExit, AutocastNames)},
      {"autocastParam", S.AutocastParam},
      {"mayThrow", S.MayThrow},
      {"clobbersModes", S.ClobbersModes},
      {"runsOwnLayers", S.RunsOwnLayers},
      {"autocastHalf", S.AutocastHalf},
      {"autocastHalfAsEntry", S.AutocastHalfAsEntry},
      {"opensAutocast", S.OpensAutocast},
      {"setsCudaDtype", S.SetsCudaDtype},
      {"cudaDtypeHalf", nameOf(S.CudaDtypeHalf, TriNames)},
      {"keepsEntryCudaDtype", S.KeepsEntryCudaDtype},
      {"mayRunOpaqueBackward", S.MayRunOpaqueBackward}};
}

} // namespace clang::tidy::torch
