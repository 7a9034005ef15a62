#include "Report.h"

#include <gtest/gtest.h>

#include <cstdio>

using namespace ttv;

namespace {

FindingResult result(Status s, const std::string &check = "torch-non-blocking-pageable") {
  FindingResult r;
  r.finding.check = check;
  r.finding.loc.file = "a.cpp";
  r.finding.loc.line = 3;
  r.status = s;
  r.evidence.text = "2 async H2D copies";
  return r;
}

std::string printed(const Analysis &a) {
  char *buf = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  printReport(a, ReportMeta{}, f);
  std::fclose(f);
  std::string s(buf, len);
  std::free(buf);
  return s;
}

} // namespace

TEST(Report, ExitCodes) {
  Analysis a;
  EXPECT_EQ(exitCodeFor(a), kExitOk);
  a.results.push_back(result(Status::Confirmed));
  a.results.push_back(result(Status::Unverifiable, "torch-cuda-unguarded"));
  EXPECT_EQ(exitCodeFor(a), kExitOk);
  a.results.push_back(result(Status::NotReached));
  EXPECT_EQ(exitCodeFor(a), kExitNotReached);
  a.results.push_back(result(Status::NotObserved));
  EXPECT_EQ(exitCodeFor(a), kExitNotObserved);  // NOT OBSERVED outranks NOT REACHED
}

TEST(Report, TableAndJson) {
  Analysis a;
  a.results.push_back(result(Status::Confirmed));
  a.results.push_back(result(Status::NotReached));
  Observation o;
  o.kind = "pageable-async-h2d";
  o.file = "b.cpp";
  o.line = 9;
  o.count = 4;
  o.text = "4 async H2D copies";
  a.observations.push_back(o);
  a.totals.peakDeviceBytes = 5 << 20;
  std::string out = printed(a);
  EXPECT_NE(out.find("CONFIRMED"), std::string::npos) << out;
  EXPECT_NE(out.find("NOT REACHED"), std::string::npos) << out;
  EXPECT_NE(out.find("a.cpp:3"), std::string::npos) << out;
  EXPECT_NE(out.find("b.cpp:9"), std::string::npos) << out;
  EXPECT_NE(out.find("Peak device memory: 5.0 MiB"), std::string::npos) << out;

  ReportMeta meta;
  meta.command = {"./train"};
  meta.programStatus = 0;
  auto j = reportJson(a, meta);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["findings"].size(), 2u);
  EXPECT_EQ(j["findings"][0]["status"], "CONFIRMED");
  EXPECT_EQ(j["findings"][1]["status"], "NOT REACHED");
  EXPECT_EQ(j["counts"]["CONFIRMED"], 1);
  EXPECT_EQ(j["observations"][0]["kind"], "pageable-async-h2d");
  EXPECT_EQ(j["peak_device_bytes"], 5 << 20);
  EXPECT_EQ(j["exit_code"], kExitNotReached);
  EXPECT_EQ(j["program_status"], 0);
}
