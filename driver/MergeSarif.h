//===--- MergeSarif.h - torch-tidy driver -----------------------*- C++ -*-===//
//
// `torch-tidy merge-sarif OUT IN...`: merges the SARIF files of the shards of
// an audit (`--shard=i/N --format=sarif`) into the one file a single run
// would have written: the union of the rules, the results sorted and with
// duplicates removed (a header finding seen by two shards), one invocation
// that failed if any shard's did.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_MERGESARIF_H
#define TORCH_TIDY_DRIVER_MERGESARIF_H

#include "OutputFormats.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

namespace torchtidy {

/// Reads back a SARIF log written by torch-tidy (printSARIF) as a Report.
/// Fails with a one-line message on anything else.
llvm::Expected<Report> readSARIF(llvm::StringRef Path);
/// The same for a parsed log; \p Command is named in the error message.
llvm::Expected<Report> fromSARIFDocument(const llvm::json::Value &Document,
                                         llvm::StringRef Path,
                                         llvm::StringRef Command);

/// Reads and parses a JSON file ("-": stdin), with a one-line error.
llvm::Expected<llvm::json::Value> readJSONFile(llvm::StringRef Path);

/// Merges reports of disjoint sets of TUs; BaseDir is the first's.
Report mergeReports(llvm::ArrayRef<Report> Reports);

/// The subcommand: `Args` are what follows `merge-sarif`. Returns the exit
/// status (0, or 2 with a one-line error).
int mergeSarifMain(llvm::ArrayRef<const char *> Args);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_MERGESARIF_H
