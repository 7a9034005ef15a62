//===--- Facts.cpp - torch-tidy -------------------------------------------===//

#include "Facts.h"
#include "State.h"
#include "api/TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "llvm/ADT/STLExtras.h"

namespace clang::tidy::torch {

//===--- Value facts -------------------------------------------------------===//

bool ValueFacts::operator==(const ValueFacts &O) const {
  return Device == O.Device && Pin == O.Pin && Graph == O.Graph &&
         Mode == O.Mode && ModeLayers == O.ModeLayers &&
         HasParameters == O.HasParameters && MeanLoss == O.MeanLoss &&
         HalfAutocast == O.HalfAutocast &&
         PendingCopy == O.PendingCopy &&
         PendingIf == O.PendingIf && ConvertedCopy == O.ConvertedCopy &&
         OrdinalSpelled == O.OrdinalSpelled &&
         SpelledOrdinal == O.SpelledOrdinal &&
         MinDims == O.MinDims && DeviceUnset == O.DeviceUnset &&
         FromDeviceConflict == O.FromDeviceConflict &&
         ConflictIf == O.ConflictIf &&
         Scalar == O.Scalar && Callables == O.Callables &&
         CallablesKnown == O.CallablesKnown &&
         CallablesOnThis == O.CallablesOnThis &&
         CallablesAtEntry == O.CallablesAtEntry && ModeIf == O.ModeIf &&
         GraphSources == O.GraphSources && Empty == O.Empty &&
         KeepsCallerFacts == O.KeepsCallerFacts;
}

void PathFacts::countPendingBackwards() {
  for (const auto &Pending : BackwardsNotStepped)
    if (!llvm::is_contained(BackwardsCounted, Pending))
      BackwardsCounted.push_back(Pending);
  CounterBranch = true;
}

ValueFacts ValueFacts::atEntry(const ValueDecl &Holder) {
  ValueFacts F;
  F.Device.Entry = &Holder;
  F.Pin.Entry = &Holder;
  F.Graph.Entry = &Holder;
  F.Mode.Entry = &Holder;
  return F;
}

ValueFacts ValueFacts::withoutEntries() const {
  ValueFacts F = *this;
  F.Device.Entry = nullptr;
  F.Device.AlsoEntry = nullptr;
  F.Device.EitherEntry = false;
  F.Pin.Entry = nullptr;
  F.Graph.Entry = nullptr;
  F.Mode.Entry = nullptr;
  F.Pin.Otherwise = {};
  F.Graph.Otherwise = {};
  F.Mode.Otherwise = {};
  F.KeepsCallerFacts = false;
  F.CallablesAtEntry = {};
  F.ModeIf = {};
  return F;
}

bool ValueFacts::dependsOnEntry() const {
  return Device.Entry || Pin.Entry || Graph.Entry || Mode.Entry ||
         bool(CallablesAtEntry) || bool(ModeIf);
}

/// Whether \p S is the entry value unchanged on some path: it depends on
/// one entry value, and nothing is known of it beyond that.
template <typename T> static bool keepsEntry(const Sourced<T> &S) {
  return S.Entry && !S.isKnown() && !S.AlsoEntry && !S.EitherEntry;
}

template <typename T>
static Sourced<T> joinSourced(const Sourced<T> &A, const Sourced<T> &B) {
  // The entry value on some paths, a value established here on the others:
  // the callers' value decides, joined with it (Sourced::Otherwise).
  auto EntryOrValue = [](const Sourced<T> &Kept, const Sourced<T> &Set) {
    if (Kept.Otherwise != T() && Kept.Otherwise != Set.Value)
      return Sourced<T>();
    Sourced<T> R = Kept;
    R.Otherwise = Set.Value;
    R.Origin = Set.Origin;
    R.Via = Set.Via;
    return R;
  };
  if (keepsEntry(A) && !B.Entry && B.isKnown())
    return EntryOrValue(A, B);
  if (keepsEntry(B) && !A.Entry && A.isKnown())
    return EntryOrValue(B, A);
  if (keepsEntry(A) && keepsEntry(B) && A.Entry == B.Entry &&
      A.Otherwise != B.Otherwise) {
    if (A.Otherwise == T())
      return B;
    return B.Otherwise == T() ? A : Sourced<T>();
  }
  if (A.Otherwise != B.Otherwise)
    return {};
  if (!(A.Value == B.Value) || A.AlsoEntry != B.AlsoEntry)
    return {};
  // An entry value known here (a member's class state, what every caller
  // passes) and the same value from elsewhere: that value, whatever entered.
  if (A.Entry != B.Entry && !A.isKnown())
    return {};
  // Keep one origin deterministically: the earlier one in the file.
  Sourced<T> R = A;
  if (B.Origin.isValid() &&
      (!A.Origin.isValid() ||
       B.Origin.getRawEncoding() < A.Origin.getRawEncoding()))
    R = B;
  if (A.Entry != B.Entry)
    R.Entry = nullptr;
  return R;
}

static Implication joinImplications(const Implication &A,
                                    const Implication &B) {
  return {A.Cuda && B.Cuda, std::min(A.CountAtLeast, B.CountAtLeast)};
}

/// A count-or-constants value's alternatives, appended to \p Out; false
/// when \p F is neither a count nor a constant.
static bool countAlternatives(const ScalarFacts &F,
                              llvm::SmallVectorImpl<int64_t> &Out) {
  if (F.IsDeviceCount) {
    Out.append(F.OrKnown.begin(), F.OrKnown.end());
    return true;
  }
  if (F.Known) {
    Out.push_back(*F.Known);
    return true;
  }
  return false;
}

ScalarFacts joinScalars(const ScalarFacts &A, const ScalarFacts &B) {
  /// How many constants a count may stand beside before it is unknown.
  constexpr size_t MaxAlternatives = 4;
  ScalarFacts R;
  if (A.Known == B.Known)
    R.Known = A.Known;
  R.IfTrue = joinImplications(A.IfTrue, B.IfTrue);
  R.IfFalse = joinImplications(A.IfFalse, B.IfFalse);
  auto Vacuous = [&R](const ScalarFacts &Constant, const ScalarFacts &Other) {
    if (!Constant.Known || Other.Known)
      return;
    if (*Constant.Known)
      R.IfFalse = Other.IfFalse;
    else
      R.IfTrue = Other.IfTrue;
  };
  Vacuous(A, B);
  Vacuous(B, A);
  if (A.IsDeviceCount || B.IsDeviceCount) {
    llvm::SmallVector<int64_t, 4> Or;
    if (countAlternatives(A, Or) && countAlternatives(B, Or)) {
      llvm::sort(Or);
      Or.erase(std::unique(Or.begin(), Or.end()), Or.end());
      if (Or.size() <= MaxAlternatives) {
        R.IsDeviceCount = true;
        R.OrKnown.assign(Or.begin(), Or.end());
      }
    }
  }
  if (R.IfTrue.CountAtLeast || R.IfFalse.CountAtLeast)
    R.CountComparison = A.CountComparison ? A.CountComparison : B.CountComparison;
  return R;
}

ValueFacts asEntryValue(ValueFacts F, const ValueDecl &D) {
  F.Pin.Entry = F.Graph.Entry = F.Mode.Entry = &D;
  // Passing a tensor whose copy is pending is the read the caller reports.
  if (isa<ParmVarDecl>(D))
    F.clearPendingCopy();
  // What a function is handed is no copy of its own to lose.
  F.clearConvertedCopy();
  if (isDeviceType(D.getType().getNonReferenceType())) {
    // A device variable this TU cannot name is, in a function that takes
    // it as a parameter, that parameter.
    if (!F.Device.Value.isKnown() ||
        (F.Device.Value.isSymbolic() && !F.Device.Value.holder() &&
         isa<ParmVarDecl>(D)))
      F.Device = {DeviceValue::symbolic(&D), D.getLocation()};
  } else {
    F.Device.Entry = &D;
  }
  return F;
}

/// Two devices that are the entry values of different holders, nothing
/// else known: a holder whose device both paths share (`a` and `a - b`: on
/// a's device, if the op ran), else either one (at most two holders).
static Sourced<DeviceValue> eitherEntry(const Sourced<DeviceValue> &A,
                                        const Sourced<DeviceValue> &B) {
  if (A.isKnown() || B.isKnown() || !A.Entry || !B.Entry)
    return {};
  if (!A.EitherEntry && !B.EitherEntry)
    for (const ValueDecl *E : {A.Entry, A.AlsoEntry})
      if (E && (E == B.Entry || E == B.AlsoEntry)) {
        Sourced<DeviceValue> R;
        R.Entry = E;
        return R;
      }
  llvm::SmallVector<const ValueDecl *, 4> Holders;
  for (const ValueDecl *E : {A.Entry, A.AlsoEntry, B.Entry, B.AlsoEntry})
    if (E && !llvm::is_contained(Holders, E))
      Holders.push_back(E);
  if (Holders.size() != 2)
    return {};
  Sourced<DeviceValue> R;
  R.Entry = Holders[0];
  R.AlsoEntry = Holders[1];
  R.EitherEntry = true;
  return R;
}

ValueFacts joinFacts(const ValueFacts &A, const ValueFacts &B) {
  if (A.Empty)
    return B;
  if (B.Empty)
    return A;
  ValueFacts R;
  R.Device = joinSourced(A.Device, B.Device);
  if (R.Device.Otherwise.isKnown())
    R.Device = {}; // devices have their own alternatives (EitherEntry)
  if (!R.Device.isKnown() && !R.Device.Entry)
    R.Device = eitherEntry(A.Device, B.Device);
  R.Pin = joinSourced(A.Pin, B.Pin);
  R.Graph = joinSourced(A.Graph, B.Graph);
  R.Mode = joinSourced(A.Mode, B.Mode);
  if (!R.Mode.isKnown() && A.Mode.isKnown() && B.Mode.isKnown()) {
    // Training on one path, evaluating on another: training on some path,
    // from where the training path set it.
    R.Mode = A.Mode.Value == ModuleMode::Eval ? B.Mode : A.Mode;
    R.Mode.Value = ModuleMode::TrainOnSomePath;
    R.Mode.Entry = R.Mode.AlsoEntry = nullptr;
  }
  R.ModeLayers = A.ModeLayers == B.ModeLayers ? A.ModeLayers : Tri::Unknown;
  R.HasParameters =
      A.HasParameters == B.HasParameters ? A.HasParameters : Tri::Unknown;
  R.MeanLoss = A.MeanLoss == B.MeanLoss ? A.MeanLoss : Tri::Unknown;
  R.HalfAutocast = A.HalfAutocast == B.HalfAutocast ? A.HalfAutocast
                                                    : SourceLocation();
  // A copy counts as pending only when it is pending on every path; paths
  // that started different copies name the first in the source.
  if (A.PendingCopy.isValid() && B.PendingCopy.isValid()) {
    bool AFirst = A.PendingCopy == B.PendingCopy ||
                  A.PendingCopy.getRawEncoding() < B.PendingCopy.getRawEncoding();
    R.PendingCopy = AFirst ? A.PendingCopy : B.PendingCopy;
    R.PendingVia = A.PendingVia == B.PendingVia ? A.PendingVia : nullptr;
    // Pending on one path whatever the callers pass, on the other if they
    // pass CUDA: pending if they pass CUDA.
    R.PendingIf = A.PendingIf ? A.PendingIf : B.PendingIf;
    if (A.PendingIf && B.PendingIf && A.PendingIf != B.PendingIf)
      R.clearPendingCopy();
  }
  // A converted copy on every path: the first conversion in the source.
  if (A.ConvertedCopy.isValid() && B.ConvertedCopy.isValid()) {
    bool AFirst = A.ConvertedCopy == B.ConvertedCopy ||
                  A.ConvertedCopy.getRawEncoding() <
                      B.ConvertedCopy.getRawEncoding();
    R.ConvertedCopy = AFirst ? A.ConvertedCopy : B.ConvertedCopy;
    R.ConvertedVia = AFirst ? A.ConvertedVia : B.ConvertedVia;
  } else {
    R.clearConvertedCopy();
  }
  // An ordinal written on some path: the first in the source.
  const ValueFacts &Ordinal =
      B.OrdinalSpelled.isInvalid() ||
              (A.OrdinalSpelled.isValid() &&
               A.OrdinalSpelled.getRawEncoding() <=
                   B.OrdinalSpelled.getRawEncoding())
          ? A
          : B;
  R.OrdinalSpelled = Ordinal.OrdinalSpelled;
  R.SpelledOrdinal = Ordinal.SpelledOrdinal;
  R.MinDims = std::min(A.MinDims, B.MinDims);
  R.FromDeviceConflict = A.FromDeviceConflict || B.FromDeviceConflict;
  R.ConflictIf = A.ConflictIf == B.ConflictIf ? A.ConflictIf : nullptr;
  R.DeviceUnset = A.DeviceUnset && B.DeviceUnset;
  R.KeepsCallerFacts = A.KeepsCallerFacts && B.KeepsCallerFacts;
  R.Scalar = joinScalars(A.Scalar, B.Scalar);
  // What a callable may hold is a "some path" fact; that it holds nothing
  // else needs every path.
  R.Callables = A.Callables;
  unite<const FunctionDecl *>(R.Callables, B.Callables);
  R.CallablesKnown = A.CallablesKnown && B.CallablesKnown;
  if (A.CallablesAtEntry == B.CallablesAtEntry)
    R.CallablesAtEntry = A.CallablesAtEntry;
  if (A.ModeIf == B.ModeIf)
    R.ModeIf = A.ModeIf;
  // A side that holds no member function puts no object in question.
  auto HoldsMethod = [](const ValueFacts &V) {
    return llvm::any_of(V.Callables, [](const FunctionDecl *F) {
      const auto *M = dyn_cast<CXXMethodDecl>(F);
      return M && !M->isStatic() && !M->getParent()->isLambda();
    });
  };
  R.CallablesOnThis = (A.CallablesOnThis || !HoldsMethod(A)) &&
                      (B.CallablesOnThis || !HoldsMethod(B)) && HoldsMethod(R);
  R.GraphSources = A.GraphSources;
  for (const Stmt *S : B.GraphSources)
    if (!llvm::is_contained(R.GraphSources, S))
      R.GraphSources.push_back(S);
  return R;
}

/// \p Changed, a value the callee changed in place, over what the caller's
/// storage held before (\p Old): the facts the callee did not establish
/// stay the caller's.
ValueFacts overCallerFacts(ValueFacts Changed, const ValueFacts &Old) {
  auto Keep = [](auto &Fact, const auto &Before) {
    if (!Fact.isKnown() && !Fact.Entry)
      Fact = Before;
  };
  Keep(Changed.Device, Old.Device);
  Keep(Changed.Pin, Old.Pin);
  Keep(Changed.Graph, Old.Graph);
  Keep(Changed.Mode, Old.Mode);
  if (Changed.ModeLayers == Tri::Unknown)
    Changed.ModeLayers = Old.ModeLayers;
  if (Changed.HasParameters == Tri::Unknown)
    Changed.HasParameters = Old.HasParameters;
  if (Changed.MeanLoss == Tri::Unknown) {
    Changed.MeanLoss = Old.MeanLoss;
    Changed.HalfAutocast = Old.HalfAutocast;
  }
  if (Changed.Scalar.empty())
    Changed.Scalar = Old.Scalar;
  Changed.MinDims = Old.MinDims;
  // A reset (`zero_()`) drops the graphs; an accumulation adds to them.
  if (Changed.Graph.Value != GraphState::NoGraph)
    for (const Stmt *Source : Old.GraphSources)
      if (!llvm::is_contained(Changed.GraphSources, Source))
        Changed.GraphSources.push_back(Source);
  Changed.KeepsCallerFacts = Old.KeepsCallerFacts;
  return Changed;
}

//===--- Path facts --------------------------------------------------------===//

bool PathFacts::operator==(const PathFacts &O) const {
  return Cuda == O.Cuda && CountAtLeast == O.CountAtLeast &&
         CudaSelectedBefore == O.CudaSelectedBefore &&
         Grad == O.Grad && GradGuards == O.GradGuards &&
         UncheckedCuda == O.UncheckedCuda && CpuSelections == O.CpuSelections &&
         AvailabilityChecks == O.AvailabilityChecks &&
         GraphsBackpropagated == O.GraphsBackpropagated &&
         EntriesBackpropagated == O.EntriesBackpropagated &&
         BackpropagatedOther == O.BackpropagatedOther &&
         ModesClobbered == O.ModesClobbered &&
         GraphsEscaped == O.GraphsEscaped &&
         StepsWithoutReset == O.StepsWithoutReset &&
         GradientsResetSinceEntry == O.GradientsResetSinceEntry &&
         BackwardsNotStepped == O.BackwardsNotStepped &&
         BackwardsCounted == O.BackwardsCounted &&
         CounterBranch == O.CounterBranch &&
         StepsRun == O.StepsRun &&
         GradientsSettledSinceEntry == O.GradientsSettledSinceEntry &&
         GradientsRescaled == O.GradientsRescaled &&
         Autocast == O.Autocast && AutocastParam == O.AutocastParam &&
         AutocastStart == O.AutocastStart &&
         AutocastHalf == O.AutocastHalf && AutocastIf == O.AutocastIf &&
         ConditionsHeld == O.ConditionsHeld &&
         CudaAutocastHalf == O.CudaAutocastHalf &&
         CudaDtypeAsEntry == O.CudaDtypeAsEntry &&
         CudaDtypeHalfWhereSet == O.CudaDtypeHalfWhereSet &&
         CudaDtypeSomeEntry == O.CudaDtypeSomeEntry &&
         AutocastHalfAsEntry == O.AutocastHalfAsEntry;
}

static GradMode joinGrad(GradMode A, GradMode B) {
  return A == B ? A : GradMode::Unknown;
}


PathFacts joinPaths(const PathFacts &A, const PathFacts &B, bool AKeptCpu,
                    bool BKeptCpu) {
  PathFacts R;
  R.Cuda = std::min(A.Cuda, B.Cuda);
  R.CudaSelectedBefore = A.CudaSelectedBefore && B.CudaSelectedBefore;
  R.CountAtLeast = std::min(A.CountAtLeast, B.CountAtLeast);
  R.CountProof = A.CountAtLeast <= B.CountAtLeast ? A.CountProof : B.CountProof;
  R.Grad = joinGrad(A.Grad, B.Grad);
  for (const auto &[Var, Mode] : A.GradGuards)
    for (const auto &[OtherVar, OtherMode] : B.GradGuards)
      if (Var == OtherVar)
        R.GradGuards.push_back({Var, joinGrad(Mode, OtherMode)});
  // A CUDA selection unchecked on one path is a fallback to the CPU when the
  // other path made a CPU selection that this one did not: `use_gpu ?
  // kCUDA : kCPU`, `if (flag) x.cuda(); else x.cpu();`.
  auto Unchecked = [](const PathFacts &Mine, const PathFacts &Other,
                      bool OtherKeptCpu, PathFacts &Out) {
    bool OtherFellBack =
        OtherKeptCpu || llvm::any_of(Other.CpuSelections, [&](const Expr *C) {
          return !llvm::is_contained(Mine.CpuSelections, C);
        });
    for (const auto &[Use, Guard] : Mine.UncheckedCuda) {
      if (OtherFellBack && !Other.hasUncheckedCuda(Use))
        continue;
      auto It = llvm::find_if(Out.UncheckedCuda,
                              [&](const auto &U) { return U.first == Use; });
      if (It == Out.UncheckedCuda.end())
        Out.UncheckedCuda.push_back({Use, Guard});
      else
        It->second = std::min(It->second, Guard);
    }
  };
  Unchecked(A, B, BKeptCpu, R);
  Unchecked(B, A, AKeptCpu, R);
  R.CpuSelections.assign(A.CpuSelections.begin(), A.CpuSelections.end());
  unite<const Expr *>(R.CpuSelections, B.CpuSelections);
  R.AvailabilityChecks.assign(A.AvailabilityChecks.begin(),
                              A.AvailabilityChecks.end());
  unite<const Expr *>(R.AvailabilityChecks, B.AvailabilityChecks);
  R.GraphsBackpropagated.assign(A.GraphsBackpropagated.begin(),
                                A.GraphsBackpropagated.end());
  unite<const Stmt *>(R.GraphsBackpropagated, B.GraphsBackpropagated);
  R.EntriesBackpropagated.assign(A.EntriesBackpropagated.begin(),
                                 A.EntriesBackpropagated.end());
  unite<const ValueDecl *>(R.EntriesBackpropagated, B.EntriesBackpropagated);
  R.BackpropagatedOther = A.BackpropagatedOther || B.BackpropagatedOther;
  R.ModesClobbered = A.ModesClobbered || B.ModesClobbered;
  R.GraphsEscaped.assign(A.GraphsEscaped.begin(), A.GraphsEscaped.end());
  unite<const Stmt *>(R.GraphsEscaped, B.GraphsEscaped);
  R.StepsWithoutReset.assign(A.StepsWithoutReset.begin(),
                             A.StepsWithoutReset.end());
  unite<std::pair<const Stmt *, SourceLocation>>(R.StepsWithoutReset,
                                                 B.StepsWithoutReset);
  R.GradientsResetSinceEntry =
      A.GradientsResetSinceEntry && B.GradientsResetSinceEntry;
  R.BackwardsNotStepped.assign(A.BackwardsNotStepped.begin(),
                               A.BackwardsNotStepped.end());
  unite<std::pair<const Stmt *, SourceLocation>>(R.BackwardsNotStepped,
                                                 B.BackwardsNotStepped);
  R.BackwardsCounted.assign(A.BackwardsCounted.begin(),
                            A.BackwardsCounted.end());
  unite<std::pair<const Stmt *, SourceLocation>>(R.BackwardsCounted,
                                                 B.BackwardsCounted);
  R.CounterBranch = A.CounterBranch || B.CounterBranch;
  R.StepsRun.assign(A.StepsRun.begin(), A.StepsRun.end());
  unite<std::pair<const Stmt *, SourceLocation>>(R.StepsRun, B.StepsRun);
  R.GradientsSettledSinceEntry =
      A.GradientsSettledSinceEntry && B.GradientsSettledSinceEntry;
  R.GradientsRescaled = A.GradientsRescaled || B.GradientsRescaled;
  // On on either path is on on some path; other disagreements are unknown.
  if (A.Autocast == AutocastState::On || B.Autocast == AutocastState::On) {
    const PathFacts &On = A.Autocast == AutocastState::On ? A : B;
    R.Autocast = AutocastState::On;
    R.AutocastStart = On.AutocastStart;
    R.AutocastIf = On.AutocastIf;
    if (A.Autocast == B.Autocast)
      llvm::erase_if(R.AutocastIf, [&](const Expr *E) {
        return !llvm::is_contained(B.AutocastIf, E);
      });
    R.AutocastHalf = (A.Autocast != AutocastState::On || A.AutocastHalf) &&
                     (B.Autocast != AutocastState::On || B.AutocastHalf);
    R.AutocastHalfAsEntry =
        (A.Autocast != AutocastState::On || A.AutocastHalfAsEntry) &&
        (B.Autocast != AutocastState::On || B.AutocastHalfAsEntry);
  } else {
    R.Autocast = A.Autocast == B.Autocast && A.AutocastParam == B.AutocastParam
                     ? A.Autocast
                     : AutocastState::Unknown;
    R.AutocastParam =
        R.Autocast == AutocastState::AsParameter ? A.AutocastParam : nullptr;
    R.AutocastStart = {nullptr, {}};
    bool Param = R.Autocast == AutocastState::AsParameter;
    R.AutocastHalf = Param && A.AutocastHalf && B.AutocastHalf;
    R.AutocastHalfAsEntry =
        Param && A.AutocastHalfAsEntry && B.AutocastHalfAsEntry;
    R.AutocastIf.clear();
  }
  R.ConditionsHeld.clear();
  for (const Expr *E : A.ConditionsHeld)
    if (llvm::is_contained(B.ConditionsHeld, E))
      R.ConditionsHeld.push_back(E);
  R.CudaDtypeAsEntry = A.CudaDtypeAsEntry && B.CudaDtypeAsEntry;
  R.CudaAutocastHalf =
      A.CudaAutocastHalf == B.CudaAutocastHalf ? A.CudaAutocastHalf : Tri::Unknown;
  R.CudaDtypeSomeEntry = A.CudaDtypeSomeEntry || B.CudaDtypeSomeEntry;
  R.CudaDtypeHalfWhereSet =
      A.CudaDtypeAsEntry ? B.CudaDtypeHalfWhereSet
      : B.CudaDtypeAsEntry || A.CudaDtypeHalfWhereSet == B.CudaDtypeHalfWhereSet
          ? A.CudaDtypeHalfWhereSet
          : Tri::Unknown;
  return R;
}

} // namespace clang::tidy::torch
