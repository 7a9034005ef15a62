//===--- PreambleFacts.cpp - torch-tidy driver ----------------------------===//

#include "PreambleFacts.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

using namespace llvm;

namespace torchtidy {

void collectWords(StringRef Text, StringSet<> &Words) {
  size_t I = 0, N = Text.size();
  while (I < N) {
    char C = Text[I];
    if (isAlpha(C) || C == '_') {
      size_t Start = I;
      while (I < N && (isAlnum(Text[I]) || Text[I] == '_'))
        ++I;
      Words.insert(Text.slice(Start, I));
    } else if (isDigit(C)) {
      while (I < N && (isAlnum(Text[I]) || Text[I] == '_' || Text[I] == '.'))
        ++I; // a number's suffix is not a word
    } else {
      ++I;
    }
  }
}

std::string ShadowCheck::shadowingHeader(ArrayRef<std::string> ProjectDirs) {
  for (StringRef Spelled : ProjectDirs) {
    StringRef Dir = Spelled;
    if (!Dir.consume_front("-iquote"))
      Dir.consume_front("-I");
    {
      std::lock_guard<std::mutex> Lock(Mutex);
      auto Known = ByDir.find(Dir);
      if (Known != ByDir.end()) {
        if (!Known->second.empty())
          return Known->second;
        continue;
      }
    }
    std::string Found;
    for (const std::string &Name : Lookups) {
      SmallString<256> Path(Dir);
      sys::path::append(Path, Name);
      if (sys::fs::exists(Path)) {
        Found = std::string(Path);
        break;
      }
    }
    std::lock_guard<std::mutex> Lock(Mutex);
    ByDir[Dir] = Found;
    if (!Found.empty())
      return Found;
  }
  return "";
}

} // namespace torchtidy
