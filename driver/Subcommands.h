//===--- Subcommands.h - torch-tidy driver ----------------------*- C++ -*-===//
//
// `torch-tidy <subcommand> ...`: commands that are not an analysis run.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_SUBCOMMANDS_H
#define TORCH_TIDY_DRIVER_SUBCOMMANDS_H

#include <optional>

namespace torchtidy {

/// Runs the subcommand named by Argv[1], if it names one, and returns its
/// exit status; std::nullopt when Argv is an ordinary analysis command line.
std::optional<int> runSubcommand(int Argc, const char **Argv);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_SUBCOMMANDS_H
