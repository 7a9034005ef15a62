//===--- ModelConfig.cpp - torch-tidy -------------------------------------===//
//
// The model's configuration from the clang-tidy options: vocabulary lists,
// out-of-memory messages, the loop depth, and the summaries of other TUs.
//
//===----------------------------------------------------------------------===//

#include "ModelCheck.h"
#include "api/TorchMatchers.h"
#include "llvm/Support/FileSystem.h"
#include <map>
#include <mutex>

namespace clang::tidy::torch {

/// The summaries a `torch.Summaries` file holds, read once per file version.
static std::shared_ptr<const ExternalSummaries>
summariesAt(llvm::StringRef Path) {
  static std::mutex Mutex;
  static std::map<std::string, std::pair<std::string,
                                         std::shared_ptr<const ExternalSummaries>>>
      Cache;
  llvm::sys::fs::file_status Status;
  std::string Version;
  if (!llvm::sys::fs::status(Path, Status))
    Version = std::to_string(Status.getSize()) + ":" +
              std::to_string(Status.getLastModificationTime()
                                 .time_since_epoch()
                                 .count());
  std::lock_guard<std::mutex> Lock(Mutex);
  auto &Slot = Cache[Path.str()];
  if (Slot.second && Slot.first == Version)
    return Slot.second;
  llvm::Expected<std::shared_ptr<ExternalSummaries>> Loaded =
      ExternalSummaries::load(Path);
  if (!Loaded) {
    llvm::consumeError(Loaded.takeError());
    Slot = {Version, nullptr};
    return nullptr;
  }
  (*Loaded)->finishEntries();
  Slot = {Version, std::move(*Loaded)};
  return Slot.second;
}

ModelConfig modelConfigFor(const ClangTidyContext &Context) {
  ModelConfig Config;
  const ClangTidyOptions::OptionMap &Options = Context.getOptions().CheckOptions;
  struct Field {
    llvm::StringRef Name;
    std::vector<std::string> TorchApiOptions::*List;
  };
  static const Field Fields[] = {
      {"ExtraSyncFunctions", &TorchApiOptions::ExtraSyncFunctions},
      {"ExtraFactories", &TorchApiOptions::ExtraFactories},
      {"ExtraPinnedAllocators", &TorchApiOptions::ExtraPinnedAllocators},
      {"BackwardFunctions", &TorchApiOptions::ExtraBackwardFunctions},
      {"TrainingStepFunctions", &TorchApiOptions::ExtraStepFunctions},
      {"GuardFunctions", &TorchApiOptions::GuardFunctions},
      {"DeviceSelectorFunctions", &TorchApiOptions::DeviceSelectorFunctions},
      {"ExtraDeviceCountFunctions", &TorchApiOptions::ExtraDeviceCountFunctions},
      {"GuardTypes", &TorchApiOptions::GuardTypes},
      {"AccumulatingFunctions", &TorchApiOptions::AccumulatingFunctions},
      {"ExtraEmptyCacheFunctions", &TorchApiOptions::ExtraEmptyCacheFunctions},
      {"EvaluationFunctions", &TorchApiOptions::EvaluationFunctions},
      {"ZeroGradFunctions", &TorchApiOptions::ZeroGradFunctions},
      {"AutocastGuardTypes", &TorchApiOptions::AutocastGuardTypes},
      {"ExtraConversionMethods", &TorchApiOptions::ExtraConversionMethods},
  };
  // The options map is unordered: gather, then sort, so that one set of
  // options is one model whatever order they were read in.
  for (const auto &Entry : Options) {
    llvm::StringRef Key = Entry.getKey();
    if (!Key.starts_with("torch.") && !Key.starts_with("torch-"))
      continue;
    llvm::StringRef Name = Key.rsplit('.').second;
    for (const Field &F : Fields)
      if (Name == F.Name)
        for (std::string &N : parseNameList(Entry.getValue().Value))
          (Config.Api.*(F.List)).push_back(std::move(N));
  }
  for (const Field &F : Fields) {
    std::vector<std::string> &L = Config.Api.*(F.List);
    llvm::sort(L);
    L.erase(std::unique(L.begin(), L.end()), L.end());
  }
  // Messages replace the default list, and compare in lower case.
  std::vector<std::string> Messages;
  for (const auto &Entry : Options)
    if (Entry.getKey().ends_with(".OutOfMemoryMessages") &&
        (Entry.getKey().starts_with("torch.") ||
         Entry.getKey().starts_with("torch-")))
      for (llvm::StringRef M :
           llvm::split(llvm::StringRef(Entry.getValue().Value), ';'))
        if (!M.trim().empty())
          Messages.push_back(M.trim().lower());
  if (!Messages.empty()) {
    llvm::sort(Messages);
    Messages.erase(std::unique(Messages.begin(), Messages.end()),
                   Messages.end());
    Config.Api.OutOfMemoryMessages = std::move(Messages);
  }
  for (llvm::StringRef Key :
       {"torch.MaxLoopDepth", "torch-host-sync-in-loop.MaxLoopDepth"})
    if (auto It = Options.find(Key); It != Options.end()) {
      unsigned Depth = 1;
      if (!llvm::StringRef(It->getValue().Value).trim().getAsInteger(10, Depth))
        Config.Api.MaxLoopDepth = std::max(1u, Depth);
    }
  if (auto It = Options.find("torch.Summaries"); It != Options.end())
    if (!It->getValue().Value.empty())
      Config.External = summariesAt(It->getValue().Value);
  return Config;
}

} // namespace clang::tidy::torch
