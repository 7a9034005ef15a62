//===--- Messages.cpp - torch-tidy driver ---------------------------------===//

#include "Messages.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/raw_ostream.h"
#include <atomic>
#include <mutex>

using namespace llvm;

namespace torchtidy {

static std::mutex StderrMutex;
static std::atomic<bool> QuietMode{false};

std::string oneLine(StringRef Text) {
  std::string Out;
  bool PendingSpace = false;
  for (char C : Text.trim()) {
    if (C == '\n' || C == '\r') {
      PendingSpace = true;
      continue;
    }
    if (PendingSpace && !Out.empty() && Out.back() != ' ')
      Out += ' ';
    PendingSpace = false;
    Out += C;
  }
  return Out;
}

static void print(StringRef Kind, const Twine &Message) {
  SmallString<256> Line;
  Line += "torch-tidy: ";
  Line += Kind;
  Line += ": ";
  Line += oneLine(Message.str());
  Line += '\n';
  std::lock_guard<std::mutex> Lock(StderrMutex);
  errs() << Line;
  errs().flush();
}

void printError(const Twine &Message) { print("error", Message); }
void printWarning(const Twine &Message) { print("warning", Message); }
void printNote(const Twine &Message) {
  if (!QuietMode)
    print("note", Message);
}
void setQuiet(bool Quiet) { QuietMode = Quiet; }

} // namespace torchtidy
