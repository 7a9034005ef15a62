//===--- Shard.cpp - torch-tidy driver ------------------------------------===//

#include "Shard.h"

#include "llvm/ADT/STLExtras.h"

using namespace llvm;

namespace torchtidy {

std::string parseShard(StringRef Text, Shard &Out) {
  auto [IndexText, CountText] = Text.split('/');
  unsigned Index, Count;
  if (IndexText.getAsInteger(10, Index) || CountText.getAsInteger(10, Count) ||
      Count == 0 || Index == 0 || Index > Count)
    return "invalid --shard '" + Text.str() +
           "' (expected i/N with 1 <= i <= N, e.g. --shard=1/4)";
  Out = {Index, Count};
  return "";
}

void selectShard(std::vector<TUJob> &TUs, const Shard &S) {
  llvm::sort(TUs,
             [](const TUJob &A, const TUJob &B) { return A.File < B.File; });
  std::vector<TUJob> Kept;
  for (size_t K = 0; K < TUs.size(); ++K)
    if (K % S.Count == S.Index - 1)
      Kept.push_back(std::move(TUs[K]));
  TUs = std::move(Kept);
}

} // namespace torchtidy
