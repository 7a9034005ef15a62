//===--- FlowAnalysisTest.cpp - torch-tidy unit tests ---------------------===//
//
// Given a snippet, what does the analysis know at a program point? Each
// snippet calls `probe(expr)`; the test reads the facts of `expr` just before
// that call, on the mock LibTorch headers.
//
//===----------------------------------------------------------------------===//

#include "model/ProgramModel.h"
#include "model/FlowAnalysis.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Frontend/ASTUnit.h"
#include "clang/Tooling/Tooling.h"
#include "gtest/gtest.h"

using namespace clang;
using namespace clang::ast_matchers;
using namespace clang::tidy::torch;

#ifndef TORCH_TIDY_TEST_INPUTS
#error "TORCH_TIDY_TEST_INPUTS must name test/Inputs"
#endif

namespace {

struct Probe {
  // Facts point into the AST (symbolic devices name their holder), so the
  // probe keeps the AST alive.
  std::unique_ptr<ASTUnit> AST;
  std::vector<ValueFacts> Facts;
  bool Converged = false;
};

Probe analyse(const std::string &Body, unsigned VisitsPerBlock =
                                           FlowAnalysis::DefaultVisitsPerBlock) {
  std::string Code = "#include <torch/torch.h>\n#include <functional>\n"
                     "template <typename T> void probe(const T &);\n" +
                     Body;
  Probe Result;
  Result.AST = tooling::buildASTFromCodeWithArgs(
      Code,
      {"-std=c++17", "-isystem", TORCH_TIDY_TEST_INPUTS,
       "-resource-dir=" TORCH_TIDY_CLANG_RESOURCE_DIR},
      "input.cpp");
  if (!Result.AST)
    return Result;
  ASTContext &Ctx = Result.AST->getASTContext();
  auto Matches =
      match(functionDecl(hasName("f"), isDefinition()).bind("f"), Ctx);
  if (Matches.empty())
    return Result;
  const auto *F = Matches[0].getNodeAs<FunctionDecl>("f");
  // Calls of the snippet's other functions go through their summaries; `f`
  // starts from "whatever each entry value is".
  std::shared_ptr<ProgramModel> Program = ProgramModel::get(Ctx, ModelConfig());
  auto Analysis = FlowAnalysis::run(*F, *Program, Program->parametricEntry(*F),
                                    VisitsPerBlock);
  if (!Analysis)
    return Result;
  Result.Converged = Analysis->converged();
  Analysis->replay([&](const Stmt &S, const State &State) {
    const auto *Call = dyn_cast<CallExpr>(&S);
    const FunctionDecl *Callee = Call ? Call->getDirectCallee() : nullptr;
    if (Callee && Callee->getIdentifier() && Callee->getName() == "probe")
      Result.Facts.push_back(
          Analysis->model().evaluate(Call->getArg(0), State));
  });
  return Result;
}

std::string deviceAt(const std::string &Body, unsigned Index = 0) {
  Probe P = analyse(Body);
  if (P.Facts.size() <= Index)
    return "<no probe>";
  return P.Facts[Index].Device.Value.describe();
}

TEST(DeviceLattice, Join) {
  EXPECT_EQ(joinDevices(DeviceValue::cpu(), DeviceValue::cpu()), DeviceValue::cpu());
  EXPECT_EQ(joinDevices(DeviceValue::cpu(), DeviceValue::cuda()), DeviceValue::unknown());
  EXPECT_EQ(compareDevices(DeviceValue::cpu(), DeviceValue::cuda()), DeviceConflict::Always);
  EXPECT_EQ(compareDevices(DeviceValue::cuda(0), DeviceValue::cuda(1)), DeviceConflict::Always);
  EXPECT_EQ(compareDevices(DeviceValue::cuda(), DeviceValue::cuda(1)), DeviceConflict::None);
  EXPECT_EQ(compareDevices(DeviceValue::unknown(), DeviceValue::cpu()), DeviceConflict::None);
}

TEST(FlowAnalysis, Factories) {
  EXPECT_EQ(deviceAt("void f() { auto x = torch::randn({2}); probe(x); }"), "CPU");
  EXPECT_EQ(deviceAt("void f() { auto x = torch::zeros({2}, torch::kCUDA); probe(x); }"), "CUDA");
  EXPECT_EQ(deviceAt("void f() { auto x = torch::ones({2}, torch::TensorOptions().device(torch::kCUDA, 1)); probe(x); }"), "cuda:1");
  EXPECT_EQ(deviceAt("void f() { auto o = torch::TensorOptions().dtype(torch::kFloat).device(\"cuda:2\"); auto x = torch::empty({2}, o); probe(x); }"), "cuda:2");
  EXPECT_EQ(deviceAt("void f() { auto x = torch::zeros({2}, torch::kCUDA); auto y = torch::zeros_like(x); probe(y); }"), "CUDA");
  EXPECT_EQ(deviceAt("void f() { auto x = torch::zeros({2}, torch::kCUDA); auto y = x.new_zeros({3}); probe(y); }"), "CUDA");
}

TEST(FlowAnalysis, ExceptionHandlers) {
  // A handler runs after any statement of its try block: it is reached,
  // with the facts of the paths into it joined.
  EXPECT_EQ(deviceAt("void g(); void f() { auto x = torch::randn({2}); try { g(); } catch (...) { probe(x); } }"), "CPU");
  EXPECT_EQ(deviceAt("void g(); void f() { auto x = torch::randn({2}).cuda(); try { g(); x = x.cpu(); g(); } catch (const std::exception &) { probe(x); } }"), "an unknown device");
  EXPECT_EQ(deviceAt("void g(); void f() { try { g(); } catch (...) { auto y = torch::ones({2}, torch::kCUDA); probe(y); } }"), "CUDA");
  // Code after the try statement sees the handler's path too.
  EXPECT_EQ(deviceAt("void g(); void f() { auto x = torch::randn({2}); try { g(); } catch (...) { x = x.cuda(); } probe(x); }"), "an unknown device");
}

TEST(FlowAnalysis, Conversions) {
  EXPECT_EQ(deviceAt("void f() { auto x = torch::randn({2}); x = x.to(torch::kCUDA); probe(x); }"), "CUDA");
  EXPECT_EQ(deviceAt("void f() { auto x = torch::randn({2}).cuda(); x = x.cpu(); probe(x); }"), "CPU");
  EXPECT_EQ(deviceAt("void f() { auto x = torch::randn({2}).cuda(); auto y = x.to(torch::kHalf); probe(y); }"), "CUDA");
  EXPECT_EQ(deviceAt("void f() { auto x = torch::randn({2}).cuda(); auto y = torch::ones({2}).to(x); probe(y); }"), "CUDA");
  EXPECT_EQ(deviceAt("void f() { auto x = torch::randn({2}).to(torch::Device(torch::kCUDA, 1), torch::kHalf); probe(x); }"), "cuda:1");
  // Tensors are not moved in place.
  EXPECT_EQ(deviceAt("void f() { auto x = torch::randn({2}); x.to(torch::kCUDA); probe(x); }"), "CPU");
}

TEST(FlowAnalysis, SymbolicDevices) {
  EXPECT_EQ(deviceAt("void f(bool c) { torch::Device d(c ? torch::kCUDA : torch::kCPU); auto x = torch::randn({2}).to(d); probe(x); }"), "'d'");
  EXPECT_EQ(deviceAt("void f(torch::Device device) { auto x = torch::randn({2}, device); probe(x); }"), "'device'");
  EXPECT_EQ(deviceAt("torch::Device pick_device(); void f() { auto x = torch::randn({2}).to(pick_device()); probe(x); }"), "'pick_device'");
  EXPECT_EQ(deviceAt("void f() { torch::Device d(torch::kCUDA); auto x = torch::randn({2}).to(d); probe(x); }"), "CUDA");
}

TEST(FlowAnalysis, Modules) {
  const char *Net = "struct NetImpl : torch::nn::Module { torch::Tensor forward(torch::Tensor x); };\n"
                    "TORCH_MODULE(Net);\n";
  EXPECT_EQ(deviceAt(std::string(Net) + "void f() { Net net; probe(net); }"), "CPU");
  EXPECT_EQ(deviceAt(std::string(Net) + "void f() { Net net; net->to(torch::kCUDA); probe(net); }"), "CUDA");
  EXPECT_EQ(deviceAt(std::string(Net) + "void f() { auto net = std::make_shared<NetImpl>(); net->to(torch::kCUDA); auto y = net->forward(torch::randn({2})); probe(y); }"), "CUDA");
  EXPECT_EQ(deviceAt(std::string(Net) + "void f(Net net) { probe(net); }"), "an unknown device");
}

TEST(FlowAnalysis, ControlFlow) {
  // Paths that disagree merge to unknown.
  EXPECT_EQ(deviceAt("void f(bool c) { auto x = torch::randn({2}); if (c) x = x.cuda(); probe(x); }"), "an unknown device");
  EXPECT_EQ(deviceAt("void f(bool c) { auto x = torch::randn({2}); if (c) x = x.cuda(); else x = x.cuda(); probe(x); }"), "CUDA");
  // Loops reach a fixpoint.
  EXPECT_EQ(deviceAt("void f(int n) { auto x = torch::randn({2}); for (int i = 0; i < n; ++i) { probe(x); x = x.cuda(); } }"), "an unknown device");
  EXPECT_EQ(deviceAt("void f(int n) { auto x = torch::randn({2}).cuda(); for (int i = 0; i < n; ++i) { probe(x); x = x * 2; } }"), "CUDA");
}

TEST(FlowAnalysis, OpaqueAndEscaping) {
  EXPECT_EQ(deviceAt("torch::Tensor load(); void f() { auto x = load(); probe(x); }"), "an unknown device");
  EXPECT_EQ(deviceAt("void init(torch::Tensor &); void f() { auto x = torch::randn({2}); init(x); probe(x); }"), "an unknown device");
  // A lambda called where it is made is followed; a callable the model
  // cannot resolve loses what it captured by reference.
  EXPECT_EQ(deviceAt("void f() { auto x = torch::randn({2}); auto g = [&] { x = x.cuda(); }; g(); probe(x); }"), "CUDA");
  EXPECT_EQ(deviceAt("void later(const std::function<void()> &); void f() { auto x = torch::randn({2}); later([&] { x = x.cuda(); }); probe(x); }"), "an unknown device");
}

TEST(FlowAnalysis, LoaderBatches) {
  Probe P = analyse(
      "void f() {\n"
      "  auto loader = torch::data::make_data_loader(torch::data::datasets::MNIST(\"d\").map(torch::data::transforms::Stack<>()), 64);\n"
      "  for (auto &batch : *loader) probe(batch.data);\n"
      "}\n");
  ASSERT_EQ(P.Facts.size(), 1u);
  EXPECT_EQ(P.Facts[0].Device.Value.describe(), "CPU");
  EXPECT_EQ(P.Facts[0].Pin.Value, Pinning::Pageable);
}

TEST(FlowAnalysis, Pinning) {
  auto pinAt = [](const std::string &Body) {
    Probe P = analyse(Body);
    return P.Facts.empty() ? Pinning::Unknown : P.Facts[0].Pin.Value;
  };
  EXPECT_EQ(pinAt("void f() { auto x = torch::randn({2}); probe(x); }"), Pinning::Pageable);
  EXPECT_EQ(pinAt("void f() { auto x = torch::randn({2}).pin_memory(); probe(x); }"), Pinning::Pinned);
  EXPECT_EQ(pinAt("void f() { auto o = torch::TensorOptions().pinned_memory(true); auto x = torch::empty({2}, o); probe(x); }"), Pinning::Pinned);
  EXPECT_EQ(pinAt("void f(torch::Tensor x) { probe(x); }"), Pinning::Unknown);
  EXPECT_EQ(pinAt("void f(torch::Tensor x) { if (x.is_pinned()) probe(x); }"), Pinning::Pinned);
  EXPECT_EQ(pinAt("void f(torch::Tensor x) { if (!x.is_pinned()) return; probe(x); }"), Pinning::Pinned);
  EXPECT_EQ(pinAt("void f(torch::Tensor x) { if (!x.is_pinned()) x = x.pin_memory(); probe(x); }"), Pinning::Pinned);
  EXPECT_EQ(pinAt("void f(float *p) { auto x = torch::from_blob(p, {2}); probe(x); }"), Pinning::Unknown);
}

TEST(FlowAnalysis, AutogradGraph) {
  const char *Net = "struct NetImpl : torch::nn::Module { torch::Tensor forward(torch::Tensor x); };\n"
                    "TORCH_MODULE(Net);\n";
  auto graphAt = [](const std::string &Body) {
    Probe P = analyse(Body);
    return P.Facts.empty() ? GraphState::Unknown : P.Facts[0].Graph.Value;
  };
  EXPECT_EQ(graphAt(std::string(Net) + "void f(Net n, torch::Tensor x) { auto y = n(x); probe(y); }"), GraphState::InGraph);
  EXPECT_EQ(graphAt(std::string(Net) + "void f(Net n, torch::Tensor x, torch::Tensor t) { auto l = torch::mse_loss(n(x), t) * 2; probe(l); }"), GraphState::InGraph);
  EXPECT_EQ(graphAt(std::string(Net) + "void f(Net n, torch::Tensor x) { auto y = n(x).detach(); probe(y); }"), GraphState::NoGraph);
  EXPECT_EQ(graphAt(std::string(Net) + "void f(Net n, torch::Tensor x) { torch::NoGradGuard g; auto y = n(x); probe(y); }"), GraphState::NoGraph);
  EXPECT_EQ(graphAt(std::string(Net) + "void f(Net n, torch::Tensor x) { torch::AutoGradMode m(true); auto y = n(x); probe(y); }"), GraphState::InGraph);
}

TEST(FlowAnalysis, PendingDeviceToHostCopies) {
  auto pendingAt = [](const std::string &Body) {
    Probe P = analyse(Body);
    return !P.Facts.empty() && P.Facts[0].PendingCopy.isValid();
  };
  EXPECT_TRUE(pendingAt("void f() { auto d = torch::randn({2}).cuda(); auto h = d.to(torch::kCPU, /*non_blocking=*/true); probe(h); }"));
  EXPECT_FALSE(pendingAt("void f() { auto d = torch::randn({2}).cuda(); auto h = d.to(torch::kCPU, true); torch::cuda::synchronize(); probe(h); }"));
  EXPECT_FALSE(pendingAt("void f() { auto d = torch::randn({2}).cuda(); auto h = d.to(torch::kCPU); probe(h); }"));
  EXPECT_TRUE(pendingAt("void f() { bool nb = true; auto d = torch::randn({2}).cuda(); auto h = d.to(torch::kCPU, nb); probe(h); }"));
}

TEST(FlowAnalysis, PendingCopiesHelpersAndReads) {
  auto pendingAt = [](const std::string &Body) {
    Probe P = analyse(Body);
    return !P.Facts.empty() && P.Facts[0].PendingCopy.isValid();
  };
  const std::string Copy = "auto d = torch::randn({2}).cuda(); auto h = d.to(torch::kCPU, true); ";
  // A helper whose visible body synchronises, a few calls down, is a sync.
  EXPECT_FALSE(pendingAt("void w() { torch::cuda::synchronize(); } void v() { w(); } void f() { " + Copy + "v(); probe(h); }"));
  EXPECT_FALSE(pendingAt("void f() { auto s = [] { torch::cuda::synchronize(); }; " + Copy + "s(); probe(h); }"));
  // An opaque one is not.
  EXPECT_TRUE(pendingAt("void w(); void f() { " + Copy + "w(); probe(h); }"));
  // A read completes nothing: later reads race the same copy (the check
  // reports each copy once per function). A user function that may
  // synchronise is not a read of what it is handed; it may wait first.
  EXPECT_TRUE(pendingAt("void use(const torch::Tensor &); void f() { " + Copy + "use(h); probe(h); }"));
  EXPECT_TRUE(pendingAt("void f() { " + Copy + "std::vector<torch::Tensor> v; v.push_back(h); probe(h); }"));
}

TEST(FlowModel, HostReadsOnTensorBase) {
  // LibTorch >= 1.11 declares data_ptr and accessor on at::TensorBase.
  std::unique_ptr<ASTUnit> AST = tooling::buildASTFromCodeWithArgs(
      "namespace at { struct TensorBase { void *data_ptr() const; void *sizes() const; }; }\n"
      "void f(const at::TensorBase &t) { t.data_ptr(); t.sizes(); }\n",
      {"-std=c++17"}, "input.cpp");
  ASSERT_TRUE(AST);
  auto Calls = match(cxxMemberCallExpr().bind("c"), AST->getASTContext());
  ASSERT_EQ(Calls.size(), 2u);
  unsigned Reads = 0;
  for (const auto &M : Calls) {
    llvm::SmallVector<const Expr *, 2> Out;
    FlowModel::hostReadOperands(*M.getNodeAs<CallExpr>("c"), Out);
    Reads += Out.size();
  }
  EXPECT_EQ(Reads, 1u);
}

TEST(TorchApi, ExtraSyncFunctionsCoverMethods) {
  std::unique_ptr<ASTUnit> AST = tooling::buildASTFromCodeWithArgs(
      "#include <torch/torch.h>\n#include <functional>\n"
      "namespace p { struct Q { void drain(); void push(); }; }\n"
      "void f(p::Q &q) { q.drain(); q.push(); }\n",
      {"-std=c++17", "-isystem", TORCH_TIDY_TEST_INPUTS,
       "-resource-dir=" TORCH_TIDY_CLANG_RESOURCE_DIR},
      "input.cpp");
  ASSERT_TRUE(AST);
  auto Calls = match(cxxMemberCallExpr(on(declRefExpr(to(varDecl(hasName("q"))))))
                         .bind("c"),
                     AST->getASTContext());
  ASSERT_EQ(Calls.size(), 2u);
  TorchApiOptions Opts;
  for (const auto &M : Calls)
    EXPECT_FALSE(isSynchronizeCall(*M.getNodeAs<CallExpr>("c"), Opts));
  Opts.ExtraSyncFunctions = {"::p::Q::drain"};
  unsigned Syncs = 0;
  for (const auto &M : Calls)
    Syncs += isSynchronizeCall(*M.getNodeAs<CallExpr>("c"), Opts);
  EXPECT_EQ(Syncs, 1u);
}

TEST(FlowAnalysis, InfiniteLoopsAndBrokenCode) {
  // `for (;;)` prunes its exit edge: the CFG then has null successors.
  EXPECT_EQ(deviceAt("void f() { auto x = torch::randn({2}); for (;;) { probe(x); } }"), "CPU");
  EXPECT_EQ(deviceAt("void f() { auto x = torch::randn({2}).cuda(); while (true) { probe(x); undeclared(); } }"), "CUDA");
}

TEST(FlowAnalysis, IterationCap) {
  std::string Body = "void f(int n) { auto x = torch::randn({2});";
  for (int I = 0; I < 30; ++I)
    Body += " for (int i" + std::to_string(I) + " = 0; i" + std::to_string(I) + " < n; ++i" + std::to_string(I) + ") {";
  Body += " x = x.cuda(); probe(x);";
  for (int I = 0; I < 30; ++I)
    Body += " }";
  Body += " }";
  EXPECT_TRUE(analyse(Body).Converged);
  EXPECT_FALSE(analyse(Body, /*VisitsPerBlock=*/1).Converged);
}

} // namespace
