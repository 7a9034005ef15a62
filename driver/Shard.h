//===--- Shard.h - torch-tidy driver ----------------------------*- C++ -*-===//
//
// `--shard=i/N`: the i-th of N disjoint parts of the translation units, so
// that a CI matrix can audit a large codebase on N machines and merge the
// SARIF files (`torch-tidy merge-sarif`). The split depends only on the list
// of files: every shard computes the same one.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_SHARD_H
#define TORCH_TIDY_DRIVER_SHARD_H

#include "CompileDb.h"
#include "llvm/ADT/StringRef.h"
#include <string>
#include <vector>

namespace torchtidy {

struct Shard {
  unsigned Index = 1; // 1-based
  unsigned Count = 1;
};

/// Parses "i/N" with 1 <= i <= N. Returns "" or a one-line error.
std::string parseShard(llvm::StringRef Text, Shard &Out);

/// Keeps the TUs of shard \p S: the files sorted by path, the k-th (from 0)
/// goes to shard k mod N + 1. Round-robin over sorted paths spreads the
/// files of one directory, which tend to cost alike, over all shards.
void selectShard(std::vector<TUJob> &TUs, const Shard &S);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_SHARD_H
