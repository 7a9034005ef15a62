//===--- Fingerprint.h - torch-tidy driver ----------------------*- C++ -*-===//
//
// A finding's fingerprint: what stays the same when unrelated code moves it.
// The check, the file relative to the project root, the flagged statement's
// text and the enclosing function's signature (whitespace and comments
// normalised), and the occurrence index among findings that share all of
// these. Line numbers are not part of it.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_FINGERPRINT_H
#define TORCH_TIDY_DRIVER_FINGERPRINT_H

#include "Finding.h"
#include "llvm/ADT/StringRef.h"
#include <string>
#include <vector>

namespace torchtidy {

/// The SARIF partialFingerprints key the fingerprints are written under.
inline constexpr const char *FingerprintKey = "torchTidy/v1";

/// The statement that starts on \p Line of \p Text (up to the line that
/// ends it with `;`, `{` or `}`), comments dropped and whitespace collapsed.
std::string normalizedStatement(llvm::StringRef Text, unsigned Line);

/// The signature of the outermost function whose body holds \p Offset in
/// \p Text (the text before its `{`, normalised); "" at namespace scope.
std::string enclosingSignature(llvm::StringRef Text, unsigned Offset);

/// Sets Fingerprint of every finding in \p Findings (sorted), with paths
/// made relative to \p Root.
void addFingerprints(std::vector<Finding> &Findings, llvm::StringRef Root,
                     SourceCache &Sources);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_FINGERPRINT_H
