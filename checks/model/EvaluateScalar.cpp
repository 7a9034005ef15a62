//===--- EvaluateScalar.cpp - torch-tidy ----------------------------------===//
//
// FlowModel::evaluateScalar and evaluateBool: the integers and booleans the
// checks branch on (device counts, `is_available()`, comparisons of
// devices), with what a branch on them proves.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "Summary.h"
#include "api/Autocast.h"
#include "api/Devices.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

std::optional<bool> FlowModel::evaluateBool(const Expr *E,
                                            const State &S) const {
  if (!E)
    return std::nullopt;
  std::optional<int64_t> V = evaluateScalar(E, S).Known;
  if (!V)
    return std::nullopt;
  return *V != 0;
}

/// The constant \p E folds to.
static std::optional<int64_t> constantOf(const Expr *E, const ASTContext &Ctx) {
  if (E->isValueDependent() || E->isTypeDependent())
    return std::nullopt;
  if (E->getType()->isBooleanType()) {
    bool B = false;
    if (E->EvaluateAsBooleanCondition(B, Ctx))
      return B;
    return std::nullopt;
  }
  if (!E->getType()->isIntegralOrEnumerationType())
    return std::nullopt;
  Expr::EvalResult R;
  if (E->EvaluateAsInt(R, Ctx) && R.Val.isInt() &&
      R.Val.getInt().getSignificantBits() <= 63)
    return R.Val.getInt().getExtValue();
  return std::nullopt;
}

static bool compareConstants(BinaryOperatorKind Op, int64_t X, int64_t Y) {
  return Op == BO_EQ   ? X == Y
         : Op == BO_NE ? X != Y
         : Op == BO_LT ? X < Y
         : Op == BO_GT ? X > Y
         : Op == BO_LE ? X <= Y
                       : X >= Y;
}

/// A device count as a truth value: nonzero means CUDA is there.
static ScalarFacts asCondition(ScalarFacts F) {
  if (F.IsDeviceCount) {
    // A nonzero constant on some path proves nothing when true.
    if (llvm::all_of(F.OrKnown, [](int64_t K) { return K == 0; })) {
      F.IfTrue.Cuda = true;
      F.IfTrue.CountAtLeast = std::max<int64_t>(F.IfTrue.CountAtLeast, 1);
    }
    F.IsDeviceCount = false;
    F.OrKnown.clear();
  }
  return F;
}

ScalarFacts FlowModel::evaluateComparison(const Expr &E, BinaryOperatorKind Op,
                                          const Expr *L, const Expr *R,
                                          const State &S) const {
  ScalarFacts Out;
  ScalarFacts A = evaluateScalar(L, S), B = evaluateScalar(R, S);
  if (A.Known && B.Known) {
    Out.Known = compareConstants(Op, *A.Known, *B.Known);
    return Out;
  }
  // `is_available() == false`: a condition compared with a constant.
  if (!A.IsDeviceCount && !B.IsDeviceCount && (Op == BO_EQ || Op == BO_NE) &&
      (A.Known.has_value() != B.Known.has_value())) {
    const ScalarFacts &Cond = A.Known ? B : A;
    bool Truth = (A.Known ? *A.Known : *B.Known) != 0;
    bool Same = (Op == BO_EQ) == Truth;
    Out.IfTrue = Same ? Cond.IfTrue : Cond.IfFalse;
    Out.IfFalse = Same ? Cond.IfFalse : Cond.IfTrue;
    Out.CountComparison = Cond.CountComparison;
    return Out;
  }
  if (A.IsDeviceCount == B.IsDeviceCount)
    return Out;
  // Read as `count OP bound`.
  const Expr *Bound = R;
  if (B.IsDeviceCount) {
    std::swap(A, B);
    Bound = L;
    Op = BinaryOperator::reverseComparisonOp(Op);
  }
  Out.CountComparison = &E;
  // Where the count is a constant on some paths, a comparison that holds for
  // that constant proves nothing when taken, and one that fails proves
  // nothing when not taken.
  auto WithConstants = [&](ScalarFacts Out) {
    for (int64_t C : A.OrKnown) {
      if (!B.Known)
        return ScalarFacts();
      (compareConstants(Op, C, *B.Known) ? Out.IfTrue : Out.IfFalse) =
          Implication();
    }
    return Out;
  };
  // A bound the program picks (an ordinal, a world size, a loop counter,
  // whatever the flow knows of it on one path): the comparison guards every
  // ordinal in what it controls.
  if (!B.Known || !constantOf(Bound->IgnoreParenImpCasts(), Ctx)) {
    if (Op == BO_GT || Op == BO_GE || Op == BO_NE)
      Out.IfTrue = {true, EveryDevice};
    else if (Op == BO_LT || Op == BO_LE || Op == BO_EQ)
      Out.IfFalse = {Op != BO_EQ, Op == BO_EQ ? 0 : EveryDevice};
    return WithConstants(Out);
  }
  int64_t K = *B.Known;
  // The count proven when the comparison is true / false.
  auto AtLeast = [](int64_t N) {
    return Implication{N >= 1, std::max<int64_t>(N, 0)};
  };
  switch (Op) {
  case BO_GT: // count > K
    Out.IfTrue = AtLeast(K + 1);
    break;
  case BO_GE:
    Out.IfTrue = AtLeast(K);
    break;
  case BO_LT: // count < K: false means count >= K
    Out.IfFalse = AtLeast(K);
    break;
  case BO_LE:
    Out.IfFalse = AtLeast(K + 1);
    break;
  case BO_EQ:
    Out.IfTrue = AtLeast(K);
    if (K == 0)
      Out.IfFalse = AtLeast(1);
    break;
  case BO_NE:
    Out.IfFalse = AtLeast(K);
    if (K == 0)
      Out.IfTrue = AtLeast(1);
    break;
  default:
    break;
  }
  return WithConstants(Out);
}

std::optional<ScalarFacts> FlowModel::deviceComparison(bool Equal,
                                                       const Expr *L,
                                                       const Expr *R) const {
  auto IsCuda = [](const Expr *E) {
    const Expr *Literal = stripToDeviceLiteral(E);
    return Literal && classifyDeviceLiteral(*Literal) == DeviceLiteralKind::CUDA;
  };
  bool CudaL = IsCuda(L), CudaR = IsCuda(R);
  if (CudaL == CudaR)
    return std::nullopt;
  // A device the program holds equals CUDA only on a machine with CUDA.
  ScalarFacts F;
  (Equal ? F.IfTrue : F.IfFalse).Cuda = true;
  return F;
}

ScalarFacts FlowModel::evaluateScalar(const Expr *E, const State &S) const {
  ScalarFacts F;
  if (!E)
    return F;
  E = E->IgnoreParens();
  if (const auto *FE = dyn_cast<FullExpr>(E))
    return evaluateScalar(FE->getSubExpr(), S);
  if (const auto *Cast = dyn_cast<CastExpr>(E)) {
    ScalarFacts Inner = evaluateScalar(Cast->getSubExpr(), S);
    if (Cast->getCastKind() == CK_IntegralToBoolean ||
        Cast->getType()->isBooleanType())
      Inner = asCondition(Inner);
    if (Inner.Known && Cast->getType()->isBooleanType())
      Inner.Known = *Inner.Known != 0;
    if (!Inner.empty())
      return Inner;
  }
  if (std::optional<int64_t> C = constantOf(E, Ctx)) {
    F.Known = C;
    return F;
  }
  // c10::optional<bool>(true) holds true.
  E = stripConversions(E);
  if (std::optional<int64_t> C = constantOf(E, Ctx)) {
    F.Known = C;
    return F;
  }
  if (const auto *UO = dyn_cast<UnaryOperator>(E)) {
    if (UO->getOpcode() == UO_LNot) {
      ScalarFacts Inner = asCondition(evaluateScalar(UO->getSubExpr(), S));
      F.IfTrue = Inner.IfFalse;
      F.IfFalse = Inner.IfTrue;
      F.CountComparison = Inner.CountComparison;
      if (Inner.Known)
        F.Known = *Inner.Known == 0;
    }
    return F;
  }
  if (const auto *BO = dyn_cast<BinaryOperator>(E)) {
    BinaryOperatorKind Op = BO->getOpcode();
    if (BO->isEqualityOp())
      if (std::optional<ScalarFacts> Device =
              deviceComparison(Op == BO_EQ, BO->getLHS(), BO->getRHS()))
        return *Device;
    if (BO->isComparisonOp())
      return evaluateComparison(*BO, Op, BO->getLHS(), BO->getRHS(), S);
    if (BO->isLogicalOp()) {
      ScalarFacts A = asCondition(evaluateScalar(BO->getLHS(), S));
      ScalarFacts B = asCondition(evaluateScalar(BO->getRHS(), S));
      auto Both = [](const Implication &X, const Implication &Y) {
        return Implication{X.Cuda || Y.Cuda,
                           std::max(X.CountAtLeast, Y.CountAtLeast)};
      };
      auto Either = [](const Implication &X, const Implication &Y) {
        return Implication{X.Cuda && Y.Cuda,
                           std::min(X.CountAtLeast, Y.CountAtLeast)};
      };
      if (Op == BO_LAnd) {
        F.IfTrue = Both(A.IfTrue, B.IfTrue);
        F.IfFalse = Either(A.IfFalse, B.IfFalse);
        if (A.Known == 0 || B.Known == 0)
          F.Known = 0;
        else if (A.Known && B.Known)
          F.Known = 1;
      } else {
        F.IfTrue = Either(A.IfTrue, B.IfTrue);
        F.IfFalse = Both(A.IfFalse, B.IfFalse);
        if ((A.Known && *A.Known) || (B.Known && *B.Known))
          F.Known = 1;
        else if (A.Known && B.Known)
          F.Known = 0;
      }
      F.CountComparison =
          A.CountComparison ? A.CountComparison : B.CountComparison;
      return F;
    }
    if (Op == BO_Assign || Op == BO_Comma)
      return evaluateScalar(Op == BO_Comma ? BO->getRHS() : BO->getLHS(), S);
    return F;
  }
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
    if ((Op->getOperator() == OO_EqualEqual ||
         Op->getOperator() == OO_ExclaimEqual) &&
        Op->getNumArgs() == 2)
      if (std::optional<ScalarFacts> Device = deviceComparison(
              Op->getOperator() == OO_EqualEqual, Op->getArg(0), Op->getArg(1)))
        return *Device;
    if (Op->isComparisonOp())
      return F;
  }
  // `t.is_cuda()`, `device.is_cuda()`: a tensor or device on CUDA means a
  // machine with CUDA.
  if (const auto *Member = dyn_cast<CXXMemberCallExpr>(E)) {
    if (const CXXMethodDecl *MD = Member->getMethodDecl();
        MD && MD->getIdentifier() && MD->getName() == "is_cuda") {
      F.IfTrue.Cuda = true;
      return F;
    }
    // `if (on_step_)`: a callable that holds a function on every path.
    if (const Expr *Object = Member->getImplicitObjectArgument();
        Object && isa_and_nonnull<CXXConversionDecl>(Member->getMethodDecl()) &&
        isCallableType(Object->getType())) {
      ValueFacts Held = evaluate(Object, S);
      if (Held.CallablesKnown && !Held.Callables.empty())
        F.Known = 1;
      return F;
    }
  }
  if (const auto *Cond = dyn_cast<ConditionalOperator>(E)) {
    ValueFacts A, B;
    A.Scalar = evaluateScalar(Cond->getTrueExpr(), S);
    B.Scalar = evaluateScalar(Cond->getFalseExpr(), S);
    return joinFacts(A, B).Scalar;
  }
  if (Location L = locationOf(E))
    return evaluateLocation(*E, L, S).Scalar;
  if (const auto *Call = dyn_cast<CallExpr>(E)) {
    if (const FunctionDecl *FD = Call->getDirectCallee()) {
      if (isAvailabilityQuery(*FD, options())) {
        // A count-like query (0 without CUDA) is a device count.
        if (Call->getType()->isBooleanType())
          F.IfTrue.Cuda = true;
        else
          F.IsDeviceCount = true;
        return F;
      }
      if (isDeviceCountFunction(*FD, options())) {
        F.IsDeviceCount = true;
        return F;
      }
    }
    // `bool was = is_autocast_enabled(kCUDA)` where every path has it off:
    // a restore (`set_autocast_enabled(kCUDA, was)`) switches it off. (On
    // is a "some path" fact: the query may still be false.)
    if (isAutocastQuery(*Call)) {
      if (S.path().Autocast == AutocastState::Off)
        F.Known = 0;
      return F;
    }
    // `device.is_cuda()`, `t.is_cuda()` prove nothing about availability;
    // a user function's summary may (`bool has_gpu()`).
    return evaluateCall(*Call, S).Scalar;
  }
  return F;
}

} // namespace clang::tidy::torch
