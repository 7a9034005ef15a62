//===--- FileDigest.cpp - torch-tidy driver -------------------------------===//

#include "FileDigest.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"

using namespace llvm;

namespace torchtidy {

std::string digestOf(StringRef Data) {
  XXH128_hash_t Hash = xxh3_128bits(arrayRefFromStringRef(Data));
  return utohexstr(Hash.high64, /*LowerCase=*/true, /*Width=*/16) +
         utohexstr(Hash.low64, /*LowerCase=*/true, /*Width=*/16);
}

std::string dependencyPath(StringRef Name, StringRef Dir) {
  SmallString<256> Path(Name);
  if (!sys::path::is_absolute(Path)) {
    Path = Dir;
    sys::path::append(Path, Name);
  }
  sys::path::remove_dots(Path, /*remove_dot_dot=*/false);
  return std::string(Path);
}

std::optional<std::string> FileDigests::get(StringRef Path) {
  {
    std::lock_guard<std::mutex> Lock(Mutex);
    auto It = Known.find(Path);
    if (It != Known.end())
      return It->second;
  }
  // Read outside the lock: two threads may hash the same file once each,
  // which is cheaper than serialising every read.
  std::optional<std::string> Digest;
  if (auto Buffer = MemoryBuffer::getFile(Path, /*IsText=*/false,
                                          /*RequiresNullTerminator=*/false))
    Digest = digestOf((*Buffer)->getBuffer());
  std::lock_guard<std::mutex> Lock(Mutex);
  Known[Path] = Digest;
  return Digest;
}

} // namespace torchtidy
