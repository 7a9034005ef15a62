//===--- MemoryBudget.h - torch-tidy driver ---------------------*- C++ -*-===//
//
// --audit's memory bound: a parse of a LibTorch TU peaks near 1 GiB, so `-j`
// parses at once can exceed what a CI runner has. Every parse (or PCH build)
// reserves its estimated peak from a budget before it starts and waits while
// the reservations of those running would exceed it; one parse always runs,
// however large. The rule and the estimates are in docs/driver.md.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_MEMORYBUDGET_H
#define TORCH_TIDY_DRIVER_MEMORYBUDGET_H

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>

namespace torchtidy {

/// The memory this process may still use: MemAvailable of /proc/meminfo,
/// lowered to what the cgroup (v2) limit leaves, if there is one.
std::optional<uint64_t> availableMemory();

class MemoryBudget {
public:
  explicit MemoryBudget(uint64_t Bytes) : Total(Bytes) {}

  /// Blocks until \p Bytes fit next to the reservations held, or nothing
  /// else is held.
  void acquire(uint64_t Bytes);
  void release(uint64_t Bytes);

  uint64_t total() const { return Total; }
  /// The most reservations that were held at once.
  unsigned peakHolders() const;

private:
  const uint64_t Total;
  uint64_t Held = 0;
  unsigned Holders = 0, PeakHolders = 0;
  mutable std::mutex Mutex;
  std::condition_variable Freed;
};

/// RAII reservation.
class MemoryReservation {
public:
  MemoryReservation(MemoryBudget &Budget, uint64_t Bytes)
      : Budget(Budget), Bytes(Bytes) {
    Budget.acquire(Bytes);
  }
  ~MemoryReservation() { Budget.release(Bytes); }
  MemoryReservation(const MemoryReservation &) = delete;
  MemoryReservation &operator=(const MemoryReservation &) = delete;

private:
  MemoryBudget &Budget;
  uint64_t Bytes;
};

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_MEMORYBUDGET_H
