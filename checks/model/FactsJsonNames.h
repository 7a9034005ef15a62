//===--- FactsJsonNames.h - torch-tidy -------------------------*- C++ -*-===//
//
// What FactsJson.cpp (the writer) and FactsJsonRead.cpp (the reader) share:
// the names of enumerated facts and the scalar facts' form. Internal to the
// two files.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_FACTSJSONNAMES_H
#define TORCH_TIDY_MODEL_FACTSJSONNAMES_H

#include "Facts.h"
#include "llvm/Support/JSON.h"
#include <optional>

namespace clang::tidy::torch::factsjson {

constexpr llvm::StringLiteral PinNames[] = {"unknown", "pinned", "pageable"};
constexpr llvm::StringLiteral GraphNames[] = {"unknown", "graph", "no-graph"};
constexpr llvm::StringLiteral ModeNames[] = {"unknown", "train", "eval",
                                             "trainOnSomePath"};
constexpr llvm::StringLiteral TriNames[] = {"unknown", "yes", "no"};
constexpr llvm::StringLiteral CudaNames[] = {"unguarded", "entry", "checked"};
constexpr llvm::StringLiteral GradNames[] = {"entry", "enabled", "disabled",
                                             "unknown"};
constexpr llvm::StringLiteral AutocastNames[] = {"entry", "off", "on",
                                                 "unknown", "parameter"};

template <typename T, size_t N>
inline llvm::StringRef nameOf(T V, const llvm::StringLiteral (&Names)[N]) {
  return unsigned(V) < N ? llvm::StringRef(Names[unsigned(V)]) : "unknown";
}
template <typename T, size_t N>
inline T valueOf(std::optional<llvm::StringRef> S, const llvm::StringLiteral (&Names)[N],
          T Default) {
  if (S)
    for (size_t I = 0; I < N; ++I)
      if (*S == Names[I])
        return T(I);
  return Default;
}

/// A scalar's facts as written; the comparison that proved a count stays
/// behind (notes name it only in its own TU).
inline llvm::json::Object scalarToJSON(const ScalarFacts &F) {
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

inline ScalarFacts scalarFromJSON(const llvm::json::Object &S) {
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

} // namespace clang::tidy::torch::factsjson

#endif // TORCH_TIDY_MODEL_FACTSJSONNAMES_H
