//===--- MemoryBudget.cpp - torch-tidy driver -----------------------------===//

#include "MemoryBudget.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"
#include <algorithm>

using namespace llvm;

namespace torchtidy {

static std::optional<uint64_t> readNumber(StringRef Path) {
  auto Buffer = MemoryBuffer::getFileAsStream(Path);
  if (!Buffer)
    return std::nullopt;
  uint64_t Value;
  if ((*Buffer)->getBuffer().trim().getAsInteger(10, Value))
    return std::nullopt; // e.g. "max": no limit
  return Value;
}

std::optional<uint64_t> availableMemory() {
  std::optional<uint64_t> Available;
  if (auto Buffer = MemoryBuffer::getFileAsStream("/proc/meminfo")) {
    SmallVector<StringRef, 64> Lines;
    (*Buffer)->getBuffer().split(Lines, '\n');
    for (StringRef Line : Lines) {
      if (!Line.consume_front("MemAvailable:"))
        continue;
      StringRef Value = Line.trim();
      uint64_t KiB;
      if (!Value.consume_back("kB") || Value.trim().getAsInteger(10, KiB))
        break;
      Available = KiB * 1024;
    }
  }
  // In a container MemAvailable is the host's; the cgroup limit is ours.
  std::optional<uint64_t> Limit = readNumber("/sys/fs/cgroup/memory.max");
  std::optional<uint64_t> Used = readNumber("/sys/fs/cgroup/memory.current");
  if (Limit && Used) {
    uint64_t Left = *Limit > *Used ? *Limit - *Used : 0;
    Available = Available ? std::min(*Available, Left) : Left;
  }
  return Available;
}

void MemoryBudget::acquire(uint64_t Bytes) {
  std::unique_lock<std::mutex> Lock(Mutex);
  Freed.wait(Lock, [&] { return Holders == 0 || Held + Bytes <= Total; });
  Held += Bytes;
  PeakHolders = std::max(PeakHolders, ++Holders);
}

void MemoryBudget::release(uint64_t Bytes) {
  {
    std::lock_guard<std::mutex> Lock(Mutex);
    Held -= Bytes;
    --Holders;
  }
  Freed.notify_all();
}

unsigned MemoryBudget::peakHolders() const {
  std::lock_guard<std::mutex> Lock(Mutex);
  return PeakHolders;
}

} // namespace torchtidy
