// The recorder core, in process: event bookkeeping and the trace writer.
#include "Recorder.h"
#include "TestUtil.h"
#include "Trace.h"

#include <gtest/gtest.h>

#include <thread>
#include <unistd.h>

using namespace ttrt;

namespace {

Event ev(EvKind k) {
  Event e;
  e.kind = k;
  e.api = "test";
  return e;
}

ttv::Trace writeAndRead(const std::string &name) {
  std::string path = tttest::scratchDir("recorder-" + name) + "/t.jsonl";
  setTracePath(path);
  EXPECT_TRUE(writeTrace("explicit"));
  ttv::Trace t;
  std::string err;
  EXPECT_TRUE(ttv::readTraceFile(path, t, err)) << err;
  return t;
}

__attribute__((noinline)) uint32_t stackHere() { return captureStack(0); }

// One call site, several calls (a loop the compiler cannot unroll).
__attribute__((noinline)) void stacksFromOneSite(uint32_t *ids, volatile int n) {
  for (int i = 0; i < n; ++i)
    ids[i] = stackHere();
}

} // namespace

TEST(RecorderCore, SyncRightAfterACopyMarksItSynced) {
  resetForTesting();
  setAlwaysWrite(true);
  addEvent(ev(EvKind::Memcpy));  // 0: followed by a sync
  addEvent(ev(EvKind::Sync));
  addEvent(ev(EvKind::Memcpy));  // 2: an allocation comes between
  addEvent(ev(EvKind::Alloc));
  addEvent(ev(EvKind::Sync));
  addEvent(ev(EvKind::Memcpy));  // 5: the sync happens on another thread
  std::thread([] { addEvent(ev(EvKind::Sync)); }).join();
  ttv::Trace t = writeAndRead("synced");
  ASSERT_EQ(t.events.size(), 7u);
  EXPECT_TRUE(t.events[0].synced);
  EXPECT_FALSE(t.events[2].synced);
  EXPECT_FALSE(t.events[5].synced);
}

TEST(RecorderCore, StacksAreDeduplicated) {
  resetForTesting();
  uint32_t ids[3];
  stacksFromOneSite(ids, 3);
  uint32_t other = captureStack(0);
  EXPECT_NE(ids[0], kNoStack);
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[1], ids[2]);
  EXPECT_NE(ids[0], other);
}

TEST(RecorderCore, PeakDeviceBytesAndFreedSizes) {
  resetForTesting();
  setAlwaysWrite(true);
  noteAlloc(0x10, 100);
  noteAlloc(0x20, 300);
  EXPECT_EQ(noteFree(0x10), 100u);
  EXPECT_EQ(noteFree(0x10), 0u);  // unknown pointer
  noteAlloc(0x30, 50);
  ttv::Trace t = writeAndRead("peak");
  EXPECT_EQ(t.peakDeviceBytes(), 400u);
}

TEST(RecorderCore, ActivityRecordsGiveTheHostKind) {
  resetForTesting();
  setAlwaysWrite(true);
  Event byRuntime = ev(EvKind::Memcpy);
  byRuntime.async = true;
  byRuntime.corrRuntime = 7;
  addEvent(byRuntime);
  Event byDriver = ev(EvKind::Memcpy);
  byDriver.corrRuntime = 8;
  byDriver.corrDriver = 9;
  addEvent(byDriver);
  Event none = ev(EvKind::Memcpy);
  none.corrRuntime = 10;
  none.host = HostKind::Pinned;
  none.hostSource = HostSource::PointerAttr;
  addEvent(none);
  CopyActivity a;
  a.corrRuntime = 7, a.corr = 70, a.dir = Dir::HtoD, a.host = HostKind::Pageable;
  a.bytes = 4096, a.startNs = 100, a.endNs = 600;
  addCopyActivity(a);
  CopyActivity b;
  b.corr = 9, b.dir = Dir::DtoH, b.host = HostKind::Pinned, b.bytes = 8;
  addCopyActivity(b);
  ttv::Trace t = writeAndRead("activity");
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].host, "pageable");
  EXPECT_EQ(t.events[0].dir, "HtoD");
  EXPECT_EQ(t.events[0].bytes, 4096u);
  EXPECT_EQ(t.events[0].gpuNs, 500u);
  EXPECT_EQ(t.events[1].host, "pinned");
  EXPECT_EQ(t.events[1].dir, "DtoH");
  EXPECT_EQ(t.events[2].host, "pinned");  // pointer-attribute fallback kept
}

TEST(RecorderCore, WritesOnceAndOnlyWithContent) {
  resetForTesting();
  setAlwaysWrite(false);
  std::string path = tttest::scratchDir("recorder-empty") + "/t.jsonl";
  setTracePath(path);
  EXPECT_FALSE(writeTrace("exit"));  // no CUDA, no events: nothing to say
  EXPECT_EQ(access(path.c_str(), F_OK), -1);
  resetForTesting();
  addEvent(ev(EvKind::Sync));
  EXPECT_TRUE(writeTrace("exit"));
  EXPECT_FALSE(writeTrace("exit"));
  setAlwaysWrite(true);
}

TEST(RecorderCore, TracePathPattern) {
  std::string pid = std::to_string(getpid());
  EXPECT_EQ(resolveTracePath(""), "torch-tidy-trace." + pid + ".jsonl");
  EXPECT_EQ(resolveTracePath("/tmp/t.%p.jsonl"), "/tmp/t." + pid + ".jsonl");
  EXPECT_EQ(resolveTracePath("/tmp/fixed.jsonl"), "/tmp/fixed.jsonl");
}

TEST(RecorderCore, OtherGpuWorkBreaksTheCopySyncPair) {
  resetForTesting();
  setAlwaysWrite(true);
  addEvent(ev(EvKind::Memcpy));
  breakSyncChain();  // e.g. a kernel launch between the copy and the sync
  addEvent(ev(EvKind::Sync));
  ttv::Trace t = writeAndRead("launch");
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_FALSE(t.events[0].synced);
}

TEST(RecorderCore, CallbackNamesLoseTheirSuffixes) {
  EXPECT_EQ(apiBaseName("cudaMemcpyAsync_v3020"), "cudaMemcpyAsync");
  EXPECT_EQ(apiBaseName("cudaMemcpyAsync_ptsz_v7000"), "cudaMemcpyAsync");
  EXPECT_EQ(apiBaseName("cudaMemcpy_ptds_v7000"), "cudaMemcpy");
  EXPECT_EQ(apiBaseName("cuMemFree_v2"), "cuMemFree");
  EXPECT_EQ(apiBaseName("cuStreamSynchronize_ptsz"), "cuStreamSynchronize");
  EXPECT_EQ(apiBaseName("cuMemCreate"), "cuMemCreate");
  EXPECT_EQ(apiBaseName("cudaMemcpy2D_v3020"), "cudaMemcpy2D");
  EXPECT_EQ(apiBaseName(nullptr), "");
}
