//===--- SummaryExporter.cpp - torch-tidy driver --------------------------===//

#include "SummaryExporter.h"
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
  explicit TakeModel(std::shared_ptr<SharedModel> Slot)
      : Slot(std::move(Slot)) {}
  void HandleTranslationUnit(ASTContext &Ctx) override {
    Slot->Model = ProgramModel::get(Ctx, clang::tidy::torch::TorchApiOptions());
  }

private:
  std::shared_ptr<SharedModel> Slot;
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
exportingConsumer(std::unique_ptr<ASTConsumer> Tidy, std::string &Out) {
  auto Slot = std::make_shared<SharedModel>();
  std::vector<std::unique_ptr<ASTConsumer>> Consumers;
  Consumers.push_back(std::make_unique<TakeModel>(Slot));
  Consumers.push_back(std::move(Tidy));
  Consumers.push_back(std::make_unique<ExportModel>(Slot, Out));
  return std::make_unique<MultiplexConsumer>(std::move(Consumers));
}

} // namespace torchtidy
