//===--- ResultGathering.cpp - torch-tidy driver --------------------------===//

#include "ResultGathering.h"

#include "Messages.h"
#include <set>
#include <tuple>

namespace torchtidy {

GatheredFixes gatherResults(std::vector<TUResult> &Results, bool Fixing,
                            Report &R) {
  GatheredFixes G;
  std::set<std::string> Rules;
  for (TUResult &T : Results) {
    Rules.insert(T.EnabledChecks.begin(), T.EnabledChecks.end());
    if (!T.ToolError.empty()) {
      printError(T.ToolError);
      R.ToolErrors.push_back({T.File, T.ToolError});
    }
    if (T.CompileError) {
      std::string Message =
          "'" + T.File + "' has compiler errors; its findings may be " +
          "incomplete" + (Fixing ? " and its fix-its are not applied" : "");
      // The reports list the compiler's errors as findings already.
      R.ToolErrors.push_back({T.File, Message});
      if (!T.FirstCompileError.empty())
        Message += "; first error: " + T.FirstCompileError;
      printError(Message);
    } else {
      for (const Finding &F : T.Findings) {
        if (F.isCompilerError())
          continue;
        G.Fixable.push_back(F);
        if (!F.UnsafeFixes.empty()) {
          // The same finding, carrying its unsafe fix-it as the one to apply.
          Finding Unsafe = F;
          Unsafe.Fixes = F.UnsafeFixes;
          G.UnsafeFixable.push_back(std::move(Unsafe));
        }
      }
    }
    G.RawErrors.insert(G.RawErrors.end(), T.Errors.begin(), T.Errors.end());
    R.Findings.insert(R.Findings.end(), T.Findings.begin(), T.Findings.end());
  }
  // A header's finding, seen from several TUs with different notes (the
  // call that reaches it): once, with the first notes in sorted order.
  onePerLocation(R.Findings);
  sortAndUnique(G.UnsafeFixable); // a header's, seen from several TUs
  R.Rules.assign(Rules.begin(), Rules.end());
  llvm::sort(R.ToolErrors, [](const ToolError &A, const ToolError &B) {
    return std::tie(A.File, A.Message) < std::tie(B.File, B.Message);
  });
  return G;
}

} // namespace torchtidy
