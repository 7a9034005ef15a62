// torch-tidy runtime recorder: the CUDA-independent core.
//
// Holds the event store, captures and de-duplicates raw call stacks, joins
// CUPTI memcpy activity records to API events, and writes the JSON Lines
// trace (schema: docs/runtime-check.md). The CUPTI hooks (CuptiHooks.cpp) and
// the __cxa_throw interposer (ThrowHook.cpp) feed it; the unit tests drive it
// directly, without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ttrt {

enum class EvKind : uint8_t { Memcpy, Free, Alloc, Sync, Throw };

// Direction of a copy, as the trace spells it.
enum class Dir : uint8_t { Unknown, HtoD, DtoH, DtoD, HtoH };

// Host side of a copy.
enum class HostKind : uint8_t { Unknown, Pageable, Pinned };

// Where HostKind came from.
enum class HostSource : uint8_t { None, Activity, PointerAttr };

constexpr uint32_t kNoStack = 0xffffffffu;

struct Event {
  EvKind kind = EvKind::Memcpy;
  Dir dir = Dir::Unknown;
  HostKind host = HostKind::Unknown;
  HostSource hostSource = HostSource::None;
  bool async = false;
  bool synced = false;  // memcpy: the next tracked call on this thread was a sync
  bool deviceMismatch = false;  // throw: message says "not on the same device"
  const char *api = "";  // static string: the CUDA API name or exception kind
  uint64_t tid = 0;
  uint64_t tNs = 0;    // steady clock at API entry, relative to recorder start
  uint64_t durNs = 0;  // host time inside the API call
  uint64_t bytes = 0;
  uint64_t stream = 0;
  uint32_t corrRuntime = 0;  // CUPTI runtime-API correlation id
  uint32_t corrDriver = 0;   // CUPTI driver-API correlation id
  uint32_t stack = kNoStack;
  uint32_t message = 0;   // throw: addMessage() id of what() (0 = none)
  uint32_t typeName = 0;  // throw: addMessage() id of the demangled type
};

struct Config {
  std::string tracePath;  // resolved output path
  int stackDepth = 96;
  uint64_t maxEvents = 2000000;
  uint64_t fullStacks = 200000;  // unwind every event up to this many
  uint64_t sampleEvery = 64;     // then unwind one event in N
  bool pointerAttr = true;       // use cuPointerGetAttribute as fallback
};

// Reads TORCH_TIDY_* variables. Idempotent.
const Config &config();

// Overrides the trace path (tests, or a program that links the core).
void setTracePath(const std::string &path);

// Resolves `pattern` (%p -> pid); empty -> "torch-tidy-trace.<pid>.jsonl".
std::string resolveTracePath(const std::string &pattern);

uint64_t nowNs();
uint64_t threadId();

// Captures the calling thread's stack (skipping `skip` innermost frames) and
// returns its de-duplicated id, or kNoStack when sampled out or unavailable.
uint32_t captureStack(int skip);

// Appends an event (the mutex is taken inside); returns its index or -1 when
// the store is full. Maintains the per-thread "memcpy then sync" state: a
// Sync event marks the previous event of the same thread synced when it was
// a memcpy.
int64_t addEvent(Event ev);

// Notes that the calling thread issued other GPU work (a kernel launch, a
// memset): a sync after it no longer "immediately follows" the last copy.
void breakSyncChain();

// Stores an exception message; returns its id for Event::message.
uint32_t addMessage(const std::string &msg);

// Device-memory accounting for the high-water mark. Keys are device pointers
// or allocation handles.
void noteAlloc(uint64_t key, uint64_t bytes);
uint64_t noteFree(uint64_t key);  // returns the bytes released (0 = unknown)

// A CUPTI memcpy activity record, joined at write time by correlation id.
struct CopyActivity {
  uint32_t corr = 0, corrRuntime = 0;
  Dir dir = Dir::Unknown;
  HostKind host = HostKind::Unknown;
  uint64_t bytes = 0, startNs = 0, endNs = 0, stream = 0;
};
void addCopyActivity(const CopyActivity &a);

// Marks that CUPTI was initialised (header flags) and whether activity works.
void setCuptiState(bool cupti, bool activity);

// Hook run before writing (the CUPTI layer flushes its activity buffers).
void setFlushHook(void (*fn)());

// Writes the trace once; later calls do nothing. `reason` goes to the
// summary ("exit", "terminate", "signal", "explicit"). Returns false on I/O
// error or when there was nothing to write.
bool writeTrace(const char *reason);

// Writes even when no CUDA/throw event was seen (used by tests).
void setAlwaysWrite(bool on);

// Testing only: forget all state so a test can record a fresh trace.
void resetForTesting();

// A CUPTI callback name without its version and per-thread-stream suffixes:
// "cudaMemcpyAsync_ptsz_v7000" -> "cudaMemcpyAsync", "cuMemFree_v2" -> "cuMemFree".
std::string apiBaseName(const char *name);

const char *dirName(Dir d);
const char *hostName(HostKind h);

} // namespace ttrt
