//===--- Requirement.h - torch-tidy -----------------------------*- C++ -*-===//
//
// What a check requires of the values at a statement, or watches for: "the
// operands of a multi-tensor op share a device", "a non-blocking
// host-to-device source is pinned", "no host sync runs on every training
// step". A check defines a Requirement (which statements impose it, on which
// operands, and when their facts violate it) and registers it; the model
// judges it wherever the facts decide, and lifts the rest into the function's
// summary, in terms of its parameters, so that each caller judges it with
// its arguments. The check receives each Violation with its path and writes
// only the message and the notes.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_REQUIREMENT_H
#define TORCH_TIDY_MODEL_REQUIREMENT_H

#include "Facts.h"
#include "State.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/Stmt.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include <string>

namespace clang::tidy::torch {

class FlowModel;
class State;

/// Where a statement runs relative to loops, as far as one function (and,
/// after instantiation, its callers) proves.
struct LoopContext {
  /// Valid when the statement runs on every iteration of a training loop
  /// (one that calls backward() or an optimizer step): that loop, or, in a
  /// callee, the call made on every iteration.
  SourceLocation TrainingLoop;
  /// The call that makes that loop a training loop, and its callee's name
  /// ("backward()"), for notes.
  SourceLocation TrainingCall;
  llvm::StringRef TrainingCallee;
  /// Valid when the statement runs inside a loop (on some iterations at
  /// least): that loop.
  SourceLocation Loop;
  /// The loop the statement runs in never calls backward() on anything,
  /// and may not (through an opaque call) either.
  bool LoopWithoutBackward = false;
  /// The statement runs on every call of its function, and no loop of the
  /// function repeats it: where it runs is the caller's to say.
  bool EveryCall = false;
};

/// Where a statement runs once its function's caller is known: what the
/// function decided stays; a statement that runs on every call runs on every
/// training step its caller runs on, and a statement outside any loop of its
/// function runs in its caller's loop.
void inheritLoopContext(LoopContext &C, const LoopContext &Caller);

/// What a requirement is judged with at a site.
struct SiteContext {
  PathFacts Path;
  LoopContext Loop;
  /// The statement that imposed the requirement (in a callee, for a lifted
  /// one); null when read from another TU.
  const Stmt *At = nullptr;
};

/// One operand of a requirement.
struct Operand {
  ValueFacts Facts;
  /// How notes name it: "'background'".
  std::string Name;
  /// The expression, in the function where the requirement was matched.
  const Expr *Source = nullptr;
  /// The storage whose facts these are, when its callers see it (a member,
  /// a reference parameter's part): at a call, facts the callee did not
  /// establish are the caller's facts of that storage.
  Location Storage;
  /// A field or element of a whole (a parameter, a member), not the whole.
  bool isPart() const { return Storage && Storage.Depth > 0; }
};

enum class Verdict {
  /// The facts satisfy it, or prove nothing.
  Holds,
  Violated,
  /// It depends on the function's callers: lift it into the summary.
  Callers,
};

/// What a statement imposes: the operands, what the statement does (for
/// messages), and flags of the requirement's own.
struct RequirementMatch {
  llvm::SmallVector<Operand, 2> Operands;
  std::string What;
  /// The requirement's own flags, and the model's below.
  unsigned Flags = 0;
  /// Set on an obligation lifted into a summary: what the statement
  /// computes reaches a backward() in the function that lifted it (a
  /// caller in another TU cannot see the statement).
  static constexpr unsigned Backpropagated = 1u << 30;
  /// Statements the notes point at, the requirement's own (judged where
  /// matched, never exported).
  llvm::SmallVector<const Stmt *, 2> Places;
};

class Requirement {
public:
  virtual ~Requirement();
  /// A stable name, for summaries exported across translation units.
  virtual llvm::StringRef name() const = 0;
  /// Whether \p S imposes the requirement; fills its operands (facts
  /// evaluated in \p St).
  virtual bool match(const Stmt &S, const FlowModel &M, const State &St,
                     RequirementMatch &Out) const = 0;
  /// Whether the facts violate it. An operand fact that stands for a
  /// value the callers give (isCallerEntry) is theirs to
  /// decide: when the verdict depends on one, answer Callers.
  virtual Verdict judge(const RequirementMatch &Site,
                        const SiteContext &Context) const = 0;
  /// Whether the operands must share a device: then a statement that meets
  /// a device its function chose with a value the callers handed over
  /// untouched is the one to blame (Judging.cpp).
  virtual bool operandsShareDevice() const { return false; }

  /// Every registered requirement, in registration order.
  static llvm::ArrayRef<const Requirement *> all();
  /// The registered requirement named \p Name, or null.
  static const Requirement *named(llvm::StringRef Name);
};

/// Registers a requirement for every model, at static initialisation:
///   static const MyRequirement Instance;
///   static const RequirementRegistration Registered(Instance);
/// The model judges every registered requirement, whichever checks run, so
/// that a summary exported across translation units is complete.
struct RequirementRegistration {
  explicit RequirementRegistration(const Requirement &R);
};

/// Whether \p Fact stands for a value that the callers give: a parameter's
/// value at entry, or a member of `*this` that the program leaves unknown
/// at entry (a submodule whose owner the caller moved). A member or a
/// global whose value the program proves is decided with that value.
template <typename T> bool isCallerEntry(const Sourced<T> &Fact) {
  return Fact.Entry && (isa<ParmVarDecl>(Fact.Entry) ||
                        (isa<FieldDecl>(Fact.Entry) && !Fact.isKnown()));
}

/// Whether two values that an operation needs on one device agree:
/// Violated when their devices are proven different (with
/// \p AllowsZeroDimCPU, a CPU tensor that may be 0-dim meets any device, as
/// element-wise operators allow), Callers when a parameter's value at entry
/// decides, Holds otherwise (Judging.cpp).
Verdict judgeSameDevice(const ValueFacts &A, const ValueFacts &B,
                        bool AllowsZeroDimCPU);

/// A requirement that the callee could not decide: in the callee's terms,
/// with the place where it was matched.
struct Obligation {
  const Requirement *Kind = nullptr;
  RequirementMatch Site;
  SiteContext Context;
  /// The statement in the callee (or a callee of it) and the calls that
  /// lead there from the callee.
  SourceLocation At;
  const Stmt *AtStmt = nullptr;
  const CallStep *Via = nullptr;
  /// The function whose statement AtStmt is; null when read from another
  /// TU.
  const FunctionDecl *MatchedIn = nullptr;
  /// The function whose summary holds this lift: MatchedIn, or the one
  /// whose call Via starts at; null when read from another TU.
  const FunctionDecl *LiftedFrom = nullptr;
};

class FlowAnalysis;

/// A requirement found violated.
struct Violation {
  const Requirement *Kind = nullptr;
  /// The analysis that judged it.
  const FlowAnalysis *Analysis = nullptr;
  /// The statement judged: the matched statement, or the call whose
  /// arguments violate a callee's obligation.
  const Stmt *Site = nullptr;
  RequirementMatch Match;
  SiteContext Context;
  /// For a callee's obligation: where in the callee it was matched, and the
  /// calls inside the callee that lead there.
  const Obligation *FromCallee = nullptr;
  /// The callee of Site, for a callee's obligation.
  const FunctionDecl *Callee = nullptr;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_REQUIREMENT_H
