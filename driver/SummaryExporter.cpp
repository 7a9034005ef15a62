//===--- SummaryExporter.cpp - torch-tidy driver --------------------------===//

#include "SummaryExporter.h"
#include "ModelCheck.h"
#include "model/ExternalSummaries.h"
#include "model/ProgramModel.h"
#include "clang/Frontend/MultiplexConsumer.h"
#include "llvm/Support/FormatVariadic.h"

using namespace clang;
using clang::tidy::torch::ProgramModel;

namespace torchtidy {
namespace {

/// Takes the model before the checks run and exports after them: the two
/// ends of a MultiplexConsumer around clang-tidy's consumer.
struct SharedModel {
  std::shared_ptr<ProgramModel> Model;
};

class TakeModel : public ASTConsumer {
public:
  TakeModel(std::shared_ptr<SharedModel> Slot,
            clang::tidy::torch::ModelConfig Config)
      : Slot(std::move(Slot)), Config(std::move(Config)) {}
  void HandleTranslationUnit(ASTContext &Ctx) override {
    // The checks' own model: the same module-wide options.
    Slot->Model = ProgramModel::get(Ctx, Config);
  }

private:
  std::shared_ptr<SharedModel> Slot;
  clang::tidy::torch::ModelConfig Config;
};

class ExportModel : public ASTConsumer {
public:
  ExportModel(std::shared_ptr<SharedModel> Slot, std::string &Out)
      : Slot(std::move(Slot)), Out(Out) {}
  void HandleTranslationUnit(ASTContext &) override {
    if (!Slot->Model)
      return;
    Out = llvm::formatv("{0}", llvm::json::Value(
                                   clang::tidy::torch::exportTranslationUnit(
                                       *Slot->Model)));
    Slot->Model.reset();
  }

private:
  std::shared_ptr<SharedModel> Slot;
  std::string &Out;
};

} // namespace

std::unique_ptr<ASTConsumer>
exportingConsumer(std::unique_ptr<ASTConsumer> Tidy, std::string &Out,
                  const clang::tidy::ClangTidyContext &Context) {
  auto Slot = std::make_shared<SharedModel>();
  std::vector<std::unique_ptr<ASTConsumer>> Consumers;
  clang::tidy::torch::ModelConfig Config =
      clang::tidy::torch::modelConfigFor(Context);
  Config.WholeProgram = true; // the TU's facts are exported for an audit
  Consumers.push_back(std::make_unique<TakeModel>(Slot, std::move(Config)));
  Consumers.push_back(std::move(Tidy));
  Consumers.push_back(std::make_unique<ExportModel>(Slot, Out));
  return std::make_unique<MultiplexConsumer>(std::move(Consumers));
}

} // namespace torchtidy
