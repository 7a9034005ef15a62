#include "Trace.h"

#include <gtest/gtest.h>

using namespace ttv;

namespace {

const char kTrace[] = R"({"type":"header","version":1,"pid":42,"cupti":true}
{"type":"module","id":0,"path":"/bin/train"}
{"type":"module","id":1,"path":"/usr/lib/libtorch_cpu.so"}
{"type":"stack","id":0,"frames":[[1,4096],[0,"0x1a2b"],[-1,77]]}
{"type":"stack","id":5,"frames":[{"file":"train.cpp","line":12,"function":"main"},{"module":"/bin/train","offset":"0x10"}]}
{"type":"memcpy","seq":0,"tid":7,"t_ns":10,"dur_ns":2000,"api":"cudaMemcpyAsync","dir":"HtoD","bytes":4096,"async":true,"stream":0,"host":"pageable","synced":false,"gpu_ns":900,"stack":0}
{"type":"sync","seq":1,"tid":7,"dur_ns":50,"api":"cudaStreamSynchronize","stack":5}
{"type":"throw","seq":2,"api":"__cxa_throw","exception":"c10::Error","message":"same device","device_mismatch":true}
{"type":"future-kind","x":1}
{"type":"summary","peak_device_bytes":1048576,"free_count":3}
)";

} // namespace

TEST(TraceReader, ParsesEveryRecordKind) {
  Trace t;
  std::string err;
  ASSERT_TRUE(readTraceText(kTrace, "t.jsonl", t, err)) << err;
  ASSERT_EQ(t.modules.size(), 2u);
  EXPECT_EQ(t.modules[0], "/bin/train");
  ASSERT_EQ(t.stacks.size(), 2u);
  ASSERT_EQ(t.stacks[0].size(), 3u);
  EXPECT_EQ(t.stacks[0][0].module, 1);
  EXPECT_EQ(t.stacks[0][0].offset, 4096u);
  EXPECT_EQ(t.stacks[0][1].offset, 0x1a2bu);
  EXPECT_EQ(t.stacks[0][2].module, -1);
  EXPECT_TRUE(t.stacks[1][0].presymbolised);
  EXPECT_EQ(t.stacks[1][0].file, "train.cpp");
  EXPECT_EQ(t.stacks[1][0].line, 12);
  EXPECT_EQ(t.stacks[1][1].module, 0);  // module given by path
  EXPECT_EQ(t.stacks[1][1].offset, 0x10u);
  ASSERT_EQ(t.events.size(), 3u);
  const Event &c = t.events[0];
  EXPECT_EQ(c.type, "memcpy");
  EXPECT_EQ(c.dir, "HtoD");
  EXPECT_EQ(c.host, "pageable");
  EXPECT_TRUE(c.async);
  EXPECT_FALSE(c.synced);
  EXPECT_EQ(c.bytes, 4096u);
  EXPECT_EQ(c.gpuNs, 900u);
  EXPECT_EQ(c.stack, 0);
  EXPECT_EQ(t.events[1].stack, 1);  // stack id 5 remapped
  EXPECT_EQ(t.events[2].stack, -1);
  EXPECT_TRUE(t.events[2].deviceMismatch);
  EXPECT_EQ(t.events[2].message, "same device");
  EXPECT_EQ(t.peakDeviceBytes(), 1048576u);
  EXPECT_EQ(t.summarySum("free_count"), 3u);
  EXPECT_EQ(t.processes.size(), 1u);
  EXPECT_EQ(t.processes[0].header.value("pid", 0), 42);
}

TEST(TraceReader, MergesTracesWithDistinctIds) {
  Trace t;
  std::string err;
  ASSERT_TRUE(readTraceText(kTrace, "a", t, err)) << err;
  ASSERT_TRUE(readTraceText(kTrace, "b", t, err)) << err;
  EXPECT_EQ(t.modules.size(), 2u);  // same paths are shared
  EXPECT_EQ(t.stacks.size(), 4u);
  ASSERT_EQ(t.events.size(), 6u);
  EXPECT_EQ(t.events[3].stack, 2);
  EXPECT_EQ(t.events[3].process, 1);
  EXPECT_EQ(t.processes.size(), 2u);
}

TEST(TraceReader, ReportsTheBadLine) {
  Trace t;
  std::string err;
  EXPECT_FALSE(readTraceText("{\"type\":\"header\"}\n{not json\n", "x.jsonl", t, err));
  EXPECT_NE(err.find("x.jsonl:2"), std::string::npos) << err;
}

TEST(TraceReader, RejectsUnknownStackAndMissingType) {
  Trace t;
  std::string err;
  EXPECT_FALSE(readTraceText("{\"type\":\"sync\",\"stack\":3}\n", "x", t, err));
  EXPECT_NE(err.find("unknown stack"), std::string::npos) << err;
  Trace t2;
  EXPECT_FALSE(readTraceText("{\"seq\":1}\n", "x", t2, err));
  Trace t3;
  EXPECT_FALSE(readTraceText("[1,2]\n", "x", t3, err));
}

TEST(TraceReader, RejectsEmptyAndNewerVersions) {
  Trace t;
  std::string err;
  EXPECT_FALSE(readTraceText("\n\n", "x", t, err));
  Trace t2;
  EXPECT_FALSE(readTraceText("{\"type\":\"header\",\"version\":2}\n", "x", t2, err));
  Trace t3;
  EXPECT_FALSE(readTraceFile("/nonexistent/trace.jsonl", t3, err));
}
