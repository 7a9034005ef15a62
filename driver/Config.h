//===--- Config.h - torch-tidy driver ---------------------------*- C++ -*-===//
//
// clang-tidy configuration as clang-tidy's own CLI builds it: built-in
// defaults (Checks: torch-*), then `.clang-tidy` files found above each source
// file (or --config / --config-file instead of them), then --checks,
// --warnings-as-errors and --header-filter on top. The "Checks" strings of
// these layers are concatenated, so a later layer refines an earlier one.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_CONFIG_H
#define TORCH_TIDY_DRIVER_CONFIG_H

#include "clang-tidy/ClangTidyOptions.h"
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torchtidy {

/// The checks enabled when neither .clang-tidy nor --checks says otherwise.
inline constexpr const char *DefaultChecks = "torch-*";

struct ConfigRequest {
  std::optional<std::string> Checks;           // --checks
  std::optional<std::string> WarningsAsErrors; // --warnings-as-errors
  std::optional<std::string> HeaderFilter;     // --header-filter
  std::string ConfigText;                      // --config
  std::string ConfigFile;                      // --config-file
};

using ProviderFactory =
    std::function<std::unique_ptr<clang::tidy::ClangTidyOptionsProvider>()>;

/// Parses --config / --config-file once and returns a factory of fresh,
/// independent providers. On failure prints a one-line error and returns an
/// empty function.
ProviderFactory makeProviderFactory(const ConfigRequest &Request);

/// The malformed `.clang-tidy` files met since the last call, one line each
/// ("invalid configuration in '<path>': <line>:<col>: <problem>"). Such a
/// file counts as empty.
std::vector<std::string> takeConfigErrors();

/// Registered checks (torch-* and, as in clang-tidy, clang-analyzer-*).
std::vector<std::string> registeredChecks();

/// Warns about every glob of \p Checks that matches no registered check.
void warnAboutUnknownChecks(llvm::StringRef Checks);

/// The checks enabled for \p File under \p Factory's options, sorted.
std::vector<std::string> enabledChecks(const ProviderFactory &Factory,
                                       llvm::StringRef File);

/// --list-checks.
void listChecks(const std::vector<std::string> &Enabled,
                llvm::raw_ostream &OS);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_CONFIG_H
