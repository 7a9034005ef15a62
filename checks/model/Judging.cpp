//===--- Judging.cpp - torch-tidy -----------------------------------------===//
//
// Requirements, judged: at every statement a requirement matches and at
// every call of a function whose summary lists obligations. A verdict that
// depends on the function's callers is lifted into its summary (with the
// call path); SummaryBuild.cpp builds the summary.
//
//===----------------------------------------------------------------------===//

#include "FlowAnalysis.h"
#include "ObligedCallees.h"
#include "ProgramModel.h"
#include "api/StdLibrary.h"
#include "api/Training.h"
#include "api/TorchMatchers.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

//===--- Composition -------------------------------------------------------===//

/// The context of a callee's obligation as seen at a call whose own
/// context is \p AtCall: what the callee decided stays; what it left to its
/// callers comes from the call.
static SiteContext compose(const SiteContext &InCallee,
                           const SiteContext &AtCall) {
  SiteContext C = InCallee;
  if (C.Path.Cuda == CudaGuard::Entry)
    C.Path.Cuda = AtCall.Path.Cuda;
  if (C.Path.Grad == GradMode::Entry)
    C.Path.Grad = AtCall.Path.Grad;
  C.Path.CountAtLeast = std::max(C.Path.CountAtLeast, AtCall.Path.CountAtLeast);
  // Gradients the callee never reset (or stepped) are the ones the call's
  // path left (the caller's statements: what it left before the call).
  if (!C.Path.GradientsResetSinceEntry && C.Path.StepsWithoutReset.empty()) {
    C.Path.StepsWithoutReset = AtCall.Path.StepsWithoutReset;
    C.Path.GradientsResetSinceEntry = AtCall.Path.GradientsResetSinceEntry;
  }
  if (!C.Path.GradientsSettledSinceEntry) {
    unite<std::pair<const Stmt *, SourceLocation>>(
        C.Path.BackwardsNotStepped, AtCall.Path.BackwardsNotStepped);
    unite<std::pair<const Stmt *, SourceLocation>>(
        C.Path.BackwardsCounted, AtCall.Path.BackwardsCounted);
    C.Path.GradientsSettledSinceEntry = AtCall.Path.GradientsSettledSinceEntry;
  }
  unite<std::pair<const Stmt *, SourceLocation>>(C.Path.StepsRun,
                                                 AtCall.Path.StepsRun);
  C.Path.GradientsRescaled |= AtCall.Path.GradientsRescaled;
  if (C.Path.Autocast == AutocastState::Entry) {
    C.Path.Autocast = AtCall.Path.Autocast;
    C.Path.AutocastStart = AtCall.Path.AutocastStart;
    C.Path.AutocastHalf = AtCall.Path.AutocastHalf;
  }
  inheritLoopContext(C.Loop, AtCall.Loop);
  return C;
}

/// At a virtual call that may run \p Override: what the same call left on
/// an earlier iteration was left by the same override (one object, one
/// dynamic type), not by the others the join of its targets brings in.
static void keepOwnDispatch(PathFacts &Path, const Stmt &Call,
                            const FunctionDecl &Override) {
  const Stmt *Body = Override.getBody();
  if (!Body)
    return;
  const SourceManager &SM = Override.getASTContext().getSourceManager();
  auto Foreign = [&](const std::pair<const Stmt *, SourceLocation> &Left) {
    return Left.first == &Call && Left.second.isValid() &&
           !SM.isPointWithin(Left.second, Body->getBeginLoc(),
                             Body->getEndLoc());
  };
  llvm::erase_if(Path.StepsWithoutReset, Foreign);
  llvm::erase_if(Path.BackwardsNotStepped, Foreign);
}

/// The context of statement \p S in analysis \p A: its path facts, where it
/// runs in its function, and, for reporting, the largest device count some
/// caller proves.
static SiteContext contextAt(const FlowAnalysis &A, const Stmt &S,
                             const State &St, const EntryContext *Entry) {
  SiteContext C;
  C.Path = St.path();
  C.Loop = A.loopContext(S);
  C.At = &S;
  if (Entry)
    C.Path.CountAtLeast = std::max(C.Path.CountAtLeast, Entry->CountAtLeast);
  return C;
}

/// \p To's facts, with the entry tags of \p From (a callee's operand).
static void keepEntryTags(ValueFacts &To, const ValueFacts &From) {
  To.Device.Entry = From.Device.Entry;
  To.Device.AlsoEntry = From.Device.AlsoEntry;
  To.Device.EitherEntry = From.Device.EitherEntry;
  To.Pin.Entry = From.Pin.Entry;
  To.Graph.Entry = From.Graph.Entry;
  To.Mode.Entry = From.Mode.Entry;
}

/// The operands as facts of this function alone: no value is left to
/// the callers.
static RequirementMatch withoutEntryTags(RequirementMatch M) {
  for (Operand &Op : M.Operands)
    keepEntryTags(Op.Facts, ValueFacts());
  return M;
}

/// Whether \p Summary lifted the requirement \p Kind matched at \p AtStmt
/// to the callers (through the call at \p CallLoc, when valid); true when
/// there is no summary to tell.
static bool lifts(const FunctionSummary *Summary, const Requirement *Kind,
                  const Stmt *AtStmt, SourceLocation CallLoc) {
  return !Summary || llvm::any_of(Summary->Obligations, [&](const Obligation &O) {
           return O.Kind == Kind && O.AtStmt == AtStmt &&
                  (CallLoc.isInvalid() || (O.Via && O.Via->Call == CallLoc));
         });
}

/// Operands that are a part of a parameter (`b.u`, `v[i]`) that nothing in
/// the function wrote: whatever the callers' part holds, theirs to judge
/// (each call instantiates it from its storage). Only for operands: an
/// entry tag names a whole, so a computed value does not take it.
static void tagUntouchedParts(RequirementMatch &Match, const FlowModel &M,
                              const State &St) {
  for (Operand &Op : Match.Operands) {
    // The storage the operand reads (a container's elements), else the
    // tensor it names.
    if (!Op.Source || !Op.Facts.isUnknown() ||
        !(isTensorType(Op.Source->getType()) || Op.Storage.isElement()))
      continue;
    Location L = Op.Storage.isElement()
                     ? Op.Storage
                     : M.locationOf(stripConversions(Op.Source));
    if (L.Kind != Location::Local || L.Depth == 0 || St.lookup(L))
      continue;
    if (const auto *P = dyn_cast_or_null<ParmVarDecl>(L.Root);
        P && P->getDeclContext() == M.function()) {
      Op.Facts = ValueFacts::atEntry(*P);
      Op.Storage = L;
    }
  }
}

/// Where the callers that \p Entry joins run their calls.
static SiteContext callersContext(const EntryContext &Entry) {
  SiteContext C;
  C.Path = Entry.Entry.path();
  C.Loop = Entry.Loop;
  return C;
}

/// Why \p O is left to the callers. Members: because of a member of `*this`
/// that the program leaves unknown (with those members taken as unknown
/// facts of the function, it would not be). SubmoduleAndParameter: a
/// submodule met with a parameter, which the module call judges itself.
enum class MemberDecision { None, Members, SubmoduleAndParameter };

static MemberDecision memberDecision(const Obligation &O) {
  RequirementMatch WithoutMembers = O.Site;
  bool Any = false, Parameters = false, Submodules = false;
  auto Drop = [&](auto &Fact) {
    if (isCallerEntry(Fact) && isa<FieldDecl>(Fact.Entry)) {
      // A submodule of a module moves with it; a module a plain class holds
      // is on the device that class chose.
      const auto *Owner =
          dyn_cast<CXXRecordDecl>(cast<FieldDecl>(Fact.Entry)->getParent());
      Submodules |= isModuleHandleType(Fact.Entry->getType()) && Owner &&
                    isModuleHandleType(QualType(Owner->getTypeForDecl(), 0));
      Fact.Entry = nullptr;
      Any = true;
    }
    Parameters |= isa_and_nonnull<ParmVarDecl>(Fact.Entry);
  };
  for (Operand &Op : WithoutMembers.Operands) {
    Drop(Op.Facts.Device);
    Drop(Op.Facts.Pin);
    Drop(Op.Facts.Graph);
  }
  // A submodule moves with its module: met with a parameter (`fc(x)` in
  // forward), it is the module call's own requirement, judged at each call.
  if (Submodules && Parameters)
    return MemberDecision::SubmoduleAndParameter;
  return Any && O.Kind->judge(WithoutMembers, O.Context) != Verdict::Callers
             ? MemberDecision::Members
             : MemberDecision::None;
}

/// Whether the function that matched \p O put one operand on a device
/// variable it holds (a Device parameter, member or global) and met it with
/// a value its callers handed over untouched (a parameter, or a member of
/// `*this`): the statement that mixes them is the one to fix, as
/// `logits == batch.y` after `batch.x.to(device)`, or `out + anchors_`.
/// Two values the callers handed over (`a + b`), or a member on a fixed
/// device, are the callers' to match.
static bool mixesChosenDeviceWithCallers(const Obligation &O) {
  if (!O.Kind->operandsShareDevice())
    return false;
  bool Chosen = false, Callers = false;
  for (const Operand &Op : O.Site.Operands) {
    const Sourced<DeviceValue> &D = Op.Facts.Device;
    Chosen |= D.Value.isSymbolic();
    Callers |= !D.Value.isKnown() &&
               isa_and_nonnull<ParmVarDecl, FieldDecl>(D.Entry) &&
               !isDeviceType(D.Entry->getType());
  }
  return Chosen && Callers;
}

/// Whether \p O is its statement's to report when the function's callers
/// (all in this TU) prove it, rather than each call's.
static bool decidedAtStatement(const Obligation &O) {
  MemberDecision Why = memberDecision(O);
  return Why == MemberDecision::Members ||
         (Why == MemberDecision::None && mixesChosenDeviceWithCallers(O));
}

/// The summary's own lift of the requirement \p Kind matched at \p AtStmt:
/// at the statement itself (\p CallLoc invalid), or through the call at
/// \p CallLoc.
static const Obligation *ownLift(const FunctionSummary *Summary,
                                 const Requirement *Kind, const Stmt *AtStmt,
                                 SourceLocation CallLoc) {
  if (!Summary)
    return nullptr;
  for (const Obligation &O : Summary->Obligations)
    if (O.Kind == Kind && O.AtStmt == AtStmt &&
        (CallLoc.isInvalid() ? !O.Via : O.Via && O.Via->Call == CallLoc))
      return &O;
  return nullptr;
}

/// Whether the summary left the requirement \p Kind matched at \p AtStmt
/// (here, or through the call at \p CallLoc) to the callers: lifted, and
/// not because of a member of `*this` or a device the function chose (the
/// statement or call reports those itself when its context proves them: a
/// member the callers set is no argument of the call).
static bool leftToCallers(const FunctionSummary *Summary,
                          const Requirement *Kind, const Stmt *AtStmt,
                          SourceLocation CallLoc) {
  if (const Obligation *Own = ownLift(Summary, Kind, AtStmt, CallLoc))
    return !decidedAtStatement(*Own);
  return lifts(Summary, Kind, AtStmt, CallLoc);
}

/// Whether a violation found in a context analysis from \p Entry is its
/// callers' to report: the summary lifted it, and the callers, in this TU,
/// judge it at their calls with the facts this context joined.
static bool reportedByCallers(const EntryContext *Entry,
                              const FunctionSummary *Summary,
                              const Requirement *Kind, const Stmt *AtStmt,
                              SourceLocation CallLoc) {
  return Entry && Entry->Complete && !Entry->Root &&
         !Entry->NoCallJudges && Summary &&
         leftToCallers(Summary, Kind, AtStmt, CallLoc);
}

/// How the context analysis from \p Entry judges its own statement's
/// \p Match that it does not leave to its callers: a value the callers
/// give is the one this context joined.
static Verdict judgeOwnStatement(const Requirement &R,
                                 const RequirementMatch &Match,
                                 const SiteContext &Here,
                                 const EntryContext &Entry,
                                 RequirementMatch *Decided = nullptr,
                                 SiteContext *DecidedContext = nullptr) {
  Verdict V = R.judge(Match, Here);
  if (V != Verdict::Callers)
    return V;
  RequirementMatch Own = withoutEntryTags(Match);
  SiteContext Composed =
      Entry.OnlyWhereWritten ? Here : compose(Here, callersContext(Entry));
  V = R.judge(Own, Composed) == Verdict::Violated ? Verdict::Violated
                                                  : Verdict::Holds;
  if (Decided)
    *Decided = std::move(Own);
  if (DecidedContext)
    *DecidedContext = std::move(Composed);
  return V;
}

bool ProgramModel::reportedAtStatement(const Obligation &O) {
  if (!O.AtStmt)
    return false;
  if (O.Via && reportedAtCall(O))
    return true;
  const FunctionDecl *F = O.MatchedIn;
  if (!F || isAnalysing(*F))
    return false;
  const Obligation *Own =
      ownLift(summary(*F), O.Kind, O.AtStmt, SourceLocation());
  if (!Own || !decidedAtStatement(*Own))
    return false;
  const FlowAnalysis *A = analysis(*F);
  std::optional<State> St = A ? A->stateBefore(*O.AtStmt) : std::nullopt;
  if (!St)
    return false;
  const EntryContext &Entry = entryContext(*F);
  if (!Entry.Complete || Entry.Root || Entry.NoCallJudges)
    return false;
  RequirementMatch Match;
  if (!O.Kind->match(*O.AtStmt, A->model(), *St, Match))
    return false;
  tagUntouchedParts(Match, A->model(), *St);
  return judgeOwnStatement(*O.Kind, Match,
                           contextAt(*A, *O.AtStmt, *St, &Entry),
                           Entry) == Verdict::Violated;
}

bool ProgramModel::reportedAtCall(const Obligation &O) {
  const FunctionDecl *F = O.LiftedFrom;
  if (!F || isAnalysing(*F) || ViolationsUnderWay.contains(F))
    return false;
  SourceLocation CallLoc = O.Via->Call;
  const Obligation *Own = ownLift(summary(*F), O.Kind, O.AtStmt, CallLoc);
  if (!Own || !decidedAtStatement(*Own))
    return false;
  // F's context reports it at that call, or leaves it to a function below.
  bool Reported = llvm::any_of(violations(*F), [&](const Violation &V) {
    return V.Kind == O.Kind && V.FromCallee &&
           V.FromCallee->AtStmt == O.AtStmt && V.Site &&
           cast<Expr>(V.Site)->getExprLoc() == CallLoc;
  });
  return Reported ||
         ReportedBelow.count({F, CallLoc.getRawEncoding(), O.AtStmt, O.Kind});
}

void ProgramModel::judge(const FlowAnalysis &A, bool Lift,
                         std::vector<Violation> *Found,
                         std::vector<Obligation> *Lifted) {
  const FlowModel &M = A.model();
  const EntryContext *Entry =
      Lift || !A.function() ? nullptr : &entryContext(*A.function());
  llvm::ArrayRef<const Requirement *> All = Requirement::all();
  std::optional<const FunctionSummary *> Own;
  // What the function's backward() calls reach (for lifted obligations).
  std::optional<llvm::DenseSet<const Stmt *>> Backpropagated;
  auto OwnSummary = [&]() {
    if (!Own)
      Own = A.function() ? summary(*A.function()) : nullptr;
    return *Own;
  };
  A.replay([&](const Stmt &S, const State &St) {
    auto Record = [&](const Requirement *R, RequirementMatch M,
                      SiteContext C) {
      Violation Out;
      Out.Kind = R;
      Out.Analysis = &A;
      Out.Site = &S;
      Out.Match = std::move(M);
      Out.Context = std::move(C);
      Found->push_back(std::move(Out));
    };
    std::optional<SiteContext> Here;
    auto ContextHere = [&]() -> const SiteContext & {
      if (!Here)
        Here = contextAt(A, S, St, Entry);
      return *Here;
    };
    // The statement's own requirements.
    llvm::SmallVector<const Requirement *, 4> MatchedHere;
    for (const Requirement *R : All) {
      RequirementMatch Match;
      if (!R->match(S, M, St, Match))
        continue;
      MatchedHere.push_back(R);
      tagUntouchedParts(Match, M, St);
      Verdict V = R->judge(Match, ContextHere());
      if (V == Verdict::Violated && Found &&
          reportedByCallers(Entry, OwnSummary(), R, &S, SourceLocation()))
        continue;
      if (V == Verdict::Violated && Found)
        Record(R, std::move(Match), ContextHere());
      else if (V == Verdict::Callers && Found && Entry &&
               Entry->NoCallJudges) {
        // The callers in other TUs left this statement to this TU (see
        // below): it is judged in their joined context.
        SiteContext Composed = compose(ContextHere(), callersContext(*Entry));
        if (R->judge(Match, Composed) == Verdict::Violated)
          Record(R, std::move(Match), std::move(Composed));
      } else if (V == Verdict::Callers && Found && Entry && Entry->Complete &&
                 !leftToCallers(OwnSummary(), R, &S, SourceLocation())) {
        // The summary decided it here (or left it to this statement), but
        // this context's entry values, and the loop it runs in, are the
        // callers': judged as facts of this function, or nobody judges it.
        RequirementMatch Own;
        SiteContext Composed;
        if (judgeOwnStatement(*R, Match, ContextHere(), *Entry, &Own,
                              &Composed) == Verdict::Violated)
          Record(R, std::move(Own), std::move(Composed));
      } else if (V == Verdict::Callers && Lifted) {
        Obligation O;
        O.Kind = R;
        for (Operand &Op : Match.Operands)
          if (!Op.Storage && Op.Source)
            Op.Storage = M.locationOf(Op.Source);
        if (!Backpropagated) {
          Backpropagated.emplace();
          for (const State &End : A.endStates())
            Backpropagated->insert(End.path().GraphsBackpropagated.begin(),
                                   End.path().GraphsBackpropagated.end());
        }
        if (Backpropagated->contains(&S))
          Match.Flags |= RequirementMatch::Backpropagated;
        O.Site = std::move(Match);
        O.Context = ContextHere();
        O.AtStmt = &S;
        O.MatchedIn = O.LiftedFrom = A.function();
        O.At = isa<Expr>(S) ? cast<Expr>(S).getExprLoc() : S.getBeginLoc();
        Lifted->push_back(std::move(O));
      }
    }
    // The obligations of the functions it calls.
    for (const auto &[Target, Summary, HandedToLibrary, OnObject,
                      SameEachRun] : obligedCallees(S, M, St)) {
      if (Summary->Obligations.empty())
        continue;
      ResolvedCall Resolved = M.resolve(cast<Expr>(S), St);
      if (Target) {
        Resolved.Callee = Target;
        if (!OnObject)
          Resolved.Object = {};
        if (HandedToLibrary)
          Resolved.Arguments.clear();
      }
      for (const Obligation &O : Summary->Obligations) {
        // A call that imposes the requirement itself on its object as a
        // whole (a module's forward, on the module) judges what the
        // callee left to that object's members.
        if ((!Target || OnObject) && llvm::is_contained(MatchedHere, O.Kind) &&
            memberDecision(O) != MemberDecision::None)
          continue;
        RequirementMatch Match = O.Site;
        for (Operand &Op : Match.Operands) {
          const ValueDecl *Param = Op.Facts.Device.Entry ? Op.Facts.Device.Entry
                                                         : Op.Facts.Pin.Entry;
          // A part of the callee's parameter or object (`b.u`) that the
          // callee did not establish: the caller's facts of that part (an
          // entry tag names only the whole).
          bool Established = !Op.Facts.withoutEntries().isUnknown();
          Op.Facts = M.instantiate(Op.Facts, Resolved, St);
          // Container elements the callee met are some of the caller's:
          // what it did not establish, and the graphs they keep, are theirs.
          std::optional<State> Temporary;
          // So are a global's, and another function's variable's (a hook's
          // capture); a variable of this function, its own statement judges.
          if (Op.isPart() ||
              (outlivesFunction(Op.Storage, Resolved.Callee) &&
               Op.Storage.Root->getDeclContext() != M.function()))
            if (Location Here =
                    M.callerStorage(Op.Storage, Resolved, St, Temporary))
              if (const ValueFacts *Caller =
                      (Temporary ? *Temporary : St).lookup(Here))
                Op.Facts = !Established ? *Caller
                           : Op.Storage.isElement()
                               ? overCallerFacts(Op.Facts, *Caller)
                               : Op.Facts;
          // An operand that is the callee's parameter is named by the
          // argument passed for it.
          if (const auto *P = dyn_cast_or_null<ParmVarDecl>(Param);
              P && !Op.isPart())
            if (P->getFunctionScopeIndex() < Resolved.Arguments.size())
              if (const Expr *Arg = Resolved.Arguments[P->getFunctionScopeIndex()];
                  Arg && !isa<CXXDefaultArgExpr>(Arg)) {
                Op.Source = Arg;
                Op.Name.clear();
              }
        }
        SiteContext Composed = compose(O.Context, ContextHere());
        if (Target && SameEachRun)
          keepOwnDispatch(Composed.Path, S, *Target);
        Composed.At = O.Context.At;
        Verdict V = O.Kind->judge(Match, Composed);
        // A statement of another TU (At is null) is reported there when its
        // TU decides it with the entry context this call joins into (the
        // operands tagged as entry values, as that TU sees them); otherwise
        // here, as within one TU.
        bool ReportedElsewhere = false;
        if (V == Verdict::Violated && !O.Context.At) {
          RequirementMatch AsCallee = Match;
          for (size_t I = 0; I < AsCallee.Operands.size(); ++I)
            keepEntryTags(AsCallee.Operands[I].Facts, O.Site.Operands[I].Facts);
          ReportedElsewhere = O.Kind->judge(AsCallee, Composed) == Verdict::Violated;
          // The catalog puts it at that statement (a value placed there met
          // one its callers handed over): there or nowhere, never at a call.
          ReportedElsewhere |= decidedAtStatement(O);
        }
        if (V == Verdict::Callers && Found && Entry && Entry->Complete &&
            O.Context.At &&
            !leftToCallers(OwnSummary(), O.Kind, O.AtStmt,
                           cast<Expr>(S).getExprLoc())) {
          RequirementMatch Own = withoutEntryTags(Match);
          V = O.Kind->judge(Own, Composed) == Verdict::Violated
                  ? Verdict::Violated
                  : Verdict::Holds;
          if (V == Verdict::Violated)
            Match = std::move(Own);
        }
        if (V == Verdict::Violated && Found &&
            (reportedByCallers(Entry, OwnSummary(), O.Kind, O.AtStmt,
                               cast<Expr>(S).getExprLoc()) ||
             reportedAtStatement(O))) {
          ReportedElsewhere = true;
          if (A.function())
            ReportedBelow.insert({A.function(),
                                  cast<Expr>(S).getExprLoc().getRawEncoding(),
                                  O.AtStmt, O.Kind});
        }
        // An operand already reported as a mismatch (the output of the
        // callee's earlier conflicting operation) holds here because that
        // one is reported: the callers need not report it either.
        if (V == Verdict::Holds && Found && A.function() &&
            llvm::any_of(Match.Operands, [](const Operand &Op) {
              return Op.Facts.FromDeviceConflict;
            }))
          ReportedBelow.insert({A.function(),
                                cast<Expr>(S).getExprLoc().getRawEncoding(),
                                O.AtStmt, O.Kind});
        if (V == Verdict::Violated && Found && !ReportedElsewhere) {
          Violation Out;
          Out.Kind = O.Kind;
          Out.Analysis = &A;
          Out.Site = &S;
          Out.Match = std::move(Match);
          Out.Context = Composed;
          Out.FromCallee = &O;
          Out.Callee = Resolved.Callee;
          Found->push_back(std::move(Out));
        } else if (V == Verdict::Callers && Lifted && Resolved.Callee) {
          Obligation Up = O;
          Up.Site = std::move(Match);
          Up.Context = Composed;
          Up.LiftedFrom = A.function();
          Up.Via = step(cast<Expr>(S).getExprLoc(),
                        calleeName(*Resolved.Callee), O.Via);
          Lifted->push_back(std::move(Up));
        }
      }
    }
  });
}

const std::vector<Violation> &ProgramModel::violations(const Decl &Owner) {
  auto It = Violations.find(&Owner);
  if (It != Violations.end())
    return It->second;
  std::vector<Violation> Found;
  Paying Budget(*this, Owner);
  const FlowAnalysis *A = nullptr;
  if (const auto *Function = dyn_cast<FunctionDecl>(&Owner))
    A = analysis(*Function);
  else if (const auto *Global = dyn_cast<VarDecl>(&Owner))
    A = initializerAnalysis(*Global);
  if (A) {
    ViolationsUnderWay.insert(&Owner);
    judge(*A, /*Lift=*/false, &Found, nullptr);
    ViolationsUnderWay.erase(&Owner);
  }
  return Violations.try_emplace(&Owner, std::move(Found)).first->second;
}

} // namespace clang::tidy::torch
