//===--- SummaryExporter.h - torch-tidy driver ------------------*- C++ -*-===//
//
// The first phase of an audit's cross-TU analysis: while the checks run on a
// TU, keep its ProgramModel (so that the checks share it), then write what
// the TU exports (clang::tidy::torch::exportTranslationUnit) as JSON text.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_SUMMARYEXPORTER_H
#define TORCH_TIDY_DRIVER_SUMMARYEXPORTER_H

#include "clang/AST/ASTConsumer.h"
#include "clang-tidy/ClangTidyDiagnosticConsumer.h"
#include <memory>
#include <string>

namespace torchtidy {

/// \p Tidy, followed by the export of the TU into \p Out.
std::unique_ptr<clang::ASTConsumer>
exportingConsumer(std::unique_ptr<clang::ASTConsumer> Tidy, std::string &Out,
                  const clang::tidy::ClangTidyContext &Context);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_SUMMARYEXPORTER_H
