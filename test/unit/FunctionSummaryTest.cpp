//===--- FunctionSummaryTest.cpp - torch-tidy unit tests ------------------===//
//
// Given a TU (on the mock LibTorch headers), what is the summary of `f`, the
// state of a class, and does a summary survive its JSON form?
//
//===----------------------------------------------------------------------===//

#include "model/ExternalSummaries.h"
#include "model/FactsJson.h"
#include "model/ProgramModel.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Frontend/ASTUnit.h"
#include "clang/Tooling/Tooling.h"
#include "gtest/gtest.h"
#include "llvm/Support/FormatVariadic.h"
#include <map>

using namespace clang;
using namespace clang::ast_matchers;
using namespace clang::tidy::torch;

namespace {

const char *const Prelude =
    "#include <torch/torch.h>\n"
    "#include <vector>\n"
    "struct NetImpl : torch::nn::Module {\n"
    "  torch::Tensor forward(torch::Tensor x);\n"
    "};\n"
    "TORCH_MODULE(Net);\n";

/// A parsed TU and its model.
struct Program {
  std::unique_ptr<ASTUnit> AST;
  std::shared_ptr<ProgramModel> Model;

  explicit Program(const std::string &Code) {
    AST = tooling::buildASTFromCodeWithArgs(
        Prelude + Code,
        {"-std=c++17", "-isystem", TORCH_TIDY_TEST_INPUTS,
         "-resource-dir=" TORCH_TIDY_CLANG_RESOURCE_DIR},
        "input.cpp");
    if (AST)
      Model = ProgramModel::get(AST->getASTContext(), ModelConfig());
  }

  const FunctionDecl *function(const std::string &Name) {
    auto Matches = match(
        functionDecl(hasName(Name), isDefinition()).bind("f"),
        AST->getASTContext());
    return Matches.empty() ? nullptr
                           : Matches[0].getNodeAs<FunctionDecl>("f");
  }

  const FunctionSummary *summary(const std::string &Name) {
    const FunctionDecl *F = function(Name);
    return F ? Model->summary(*F) : nullptr;
  }
};

std::string holderName(const DeviceValue &V) {
  return V.isSymbolic() ? V.holder()->getNameAsString() : "";
}

/// The name of the parameter (or member) a location of the callee names.
std::string rootName(const Location &L) {
  return L.Root ? L.Root->getNameAsString() : "";
}

TEST(FunctionSummary, ReturnsAPageableCPUTensor) {
  Program P("torch::Tensor f() {\n"
            "  std::vector<float> buffer(16);\n"
            "  return torch::from_blob(buffer.data(), {16}).clone();\n"
            "}\n");
  const FunctionSummary *S = P.summary("f");
  ASSERT_TRUE(S);
  ValueFacts R = S->returned();
  EXPECT_TRUE(R.Device.Value.isCPU());
  EXPECT_EQ(R.Pin.Value, Pinning::Pageable);
  EXPECT_EQ(R.Graph.Value, GraphState::NoGraph);
  EXPECT_TRUE(R.Device.Origin.isValid());
}

TEST(FunctionSummary, ReturnsItsArgumentMovedToItsDevice) {
  Program P("torch::Tensor f(torch::Tensor t, torch::Device device) {\n"
            "  return t.to(device);\n"
            "}\n");
  const FunctionSummary *S = P.summary("f");
  ASSERT_TRUE(S);
  EXPECT_EQ(holderName(S->returned().Device.Value), "device");
  // Pinning and graph are the argument's.
  ASSERT_TRUE(S->returned().Graph.Entry);
  EXPECT_EQ(S->returned().Graph.Entry->getName(), "t");
}

TEST(FunctionSummary, ReturnsAModuleOnItsDeviceParameter) {
  Program P("Net f(torch::Device device) {\n"
            "  Net model;\n"
            "  model->to(device);\n"
            "  return model;\n"
            "}\n");
  const FunctionSummary *S = P.summary("f");
  ASSERT_TRUE(S);
  EXPECT_EQ(holderName(S->returned().Device.Value), "device");
}

TEST(FunctionSummary, EffectsOnAModuleAndAReference) {
  Program P("void f(Net &net, torch::Tensor &t, torch::Device d) {\n"
            "  net->to(d);\n"
            "  t = t.cuda();\n"
            "}\n");
  const FunctionSummary *S = P.summary("f");
  ASSERT_TRUE(S);
  ASSERT_EQ(S->Effects.size(), 2u);
  EXPECT_EQ(rootName(S->Effects[0].Where), "net");
  EXPECT_EQ(holderName(S->Effects[0].Exit.Device.Value), "d");
  EXPECT_EQ(rootName(S->Effects[1].Where), "t");
  EXPECT_TRUE(S->Effects[1].Exit.Device.Value.isCUDA());
}

TEST(FunctionSummary, RequirementsOnParameters) {
  Program P("torch::Tensor f(Net &model, const torch::Tensor &scene,\n"
            "                const torch::Tensor &background) {\n"
            "  return model->forward(scene) + background;\n"
            "}\n"
            "torch::Tensor g(const torch::Tensor &t, torch::Device d) {\n"
            "  return t.to(d, /*non_blocking=*/true);\n"
            "}\n"
            "void h(Net &model, const torch::Tensor &x) { f(model, x, x); }\n");
  const FunctionSummary *F = P.summary("f");
  ASSERT_TRUE(F);
  auto EntryName = [](const Operand &Op) {
    const ValueDecl *D = Op.Facts.Device.Entry ? Op.Facts.Device.Entry
                                               : Op.Facts.Pin.Entry;
    return D ? D->getNameAsString() : std::string();
  };
  bool SawModuleCall = false, SawPlus = false;
  bool SawForward = false;
  for (const Obligation &O : F->Obligations) {
    // The module's forward records a graph unless the caller disables it.
    if (O.Kind->name() == "forward-records-graph") {
      SawForward = true;
      continue;
    }
    // Its mode and layers are the callers' too.
    if (O.Kind->name() == "forward-in-right-mode")
      continue;
    ASSERT_EQ(O.Kind->name(), "same-device");
    ASSERT_EQ(O.Site.Operands.size(), 2u);
    SawModuleCall |= O.Site.What.empty() &&
                     EntryName(O.Site.Operands[0]) == "model";
    SawPlus |= O.Site.What == "operator '+'" &&
               EntryName(O.Site.Operands[1]) == "background";
  }
  EXPECT_TRUE(SawModuleCall);
  EXPECT_TRUE(SawPlus);
  EXPECT_TRUE(SawForward);

  const FunctionSummary *G = P.summary("g");
  ASSERT_TRUE(G);
  ASSERT_EQ(G->Obligations.size(), 1u);
  EXPECT_EQ(G->Obligations[0].Kind->name(), "pinned-source");
  EXPECT_EQ(EntryName(G->Obligations[0].Site.Operands[0]), "t");

  // h passes its own parameters on: the obligations become h's, with the
  // call on their path.
  const FunctionSummary *H = P.summary("h");
  ASSERT_TRUE(H);
  ASSERT_FALSE(H->Obligations.empty());
  EXPECT_TRUE(H->Obligations[0].Via);
}

TEST(FunctionSummary, UnknownWhenNothingIsProven) {
  Program P("torch::Tensor f(int n) {\n"
            "  if (n == 0) return torch::zeros({2});\n"
            "  return f(n - 1);\n"
            "}\n"
            "torch::Tensor declared();\n"
            "struct Source { virtual torch::Tensor get() { return torch::zeros({2}); } };\n"
            "struct Cached : Source { torch::Tensor get() override { return torch::ones({2}); } };\n"
            "void use(Source &s) { s.get(); declared(); }\n");
  EXPECT_EQ(P.summary("f"), nullptr); // recursive
  const FunctionDecl *Declared = nullptr;
  for (const Decl *D : P.AST->getASTContext().getTranslationUnitDecl()->decls())
    if (const auto *FD = dyn_cast<FunctionDecl>(D))
      if (FD->getName() == "declared")
        Declared = FD;
  ASSERT_TRUE(Declared);
  EXPECT_EQ(P.Model->summary(*Declared), nullptr);
  // The virtual call with two definitions in view has no summary; the
  // method itself does.
  auto Calls = match(
      cxxMemberCallExpr(callee(cxxMethodDecl(hasName("get")))).bind("c"),
      P.AST->getASTContext());
  ASSERT_EQ(Calls.size(), 1u);
  EXPECT_EQ(P.Model->summaryForCall(*Calls[0].getNodeAs<CallExpr>("c")),
            nullptr);
}

TEST(FunctionSummary, VirtualCallWithOneDefinitionRunsIt) {
  // The classes are the main file's: no other TU derives from them, and
  // only one definition of get() exists.
  Program P("struct Source { virtual torch::Tensor get() = 0; };\n"
            "struct Only : Source { torch::Tensor get() override { return torch::zeros({2}); } };\n"
            "void use(Source &s) { s.get(); }\n");
  auto Calls = match(
      cxxMemberCallExpr(callee(cxxMethodDecl(hasName("get")))).bind("c"),
      P.AST->getASTContext());
  ASSERT_EQ(Calls.size(), 1u);
  const FunctionSummary *S =
      P.Model->summaryForCall(*Calls[0].getNodeAs<CallExpr>("c"));
  ASSERT_TRUE(S);
  EXPECT_TRUE(S->returned().Device.Value.isCPU());
}

TEST(FunctionSummary, TrainingFlags) {
  Program P("void step(torch::Tensor loss, torch::optim::SGD &opt) {\n"
            "  loss.backward();\n"
            "  opt.step();\n"
            "}\n"
            "void f(torch::Tensor loss, torch::optim::SGD &opt) { step(loss, opt); }\n"
            "void g() { torch::cuda::synchronize(); }\n");
  const FunctionSummary *F = P.summary("f");
  ASSERT_TRUE(F);
  EXPECT_TRUE(F->Backward.isValid());
  EXPECT_TRUE(F->Step.isValid());
  const FunctionSummary *G = P.summary("g");
  ASSERT_TRUE(G);
  EXPECT_TRUE(G->MaySynchronize);
  EXPECT_FALSE(G->Backward.isValid());
}

TEST(ClassState, WhatEveryConstructorEstablishes) {
  Program P("class Trainer {\n"
            "public:\n"
            "  Trainer() : device_(torch::kCUDA) { model_->to(device_); }\n"
            "  explicit Trainer(int) : device_(torch::kCUDA) { model_->to(device_); }\n"
            "  void fit();\n"
            "private:\n"
            "  Net model_;\n"
            "  torch::Device device_;\n"
            "  torch::Tensor buffer_;\n"
            "};\n"
            "void Trainer::fit() {}\n"
            "class Moved {\n"
            "public:\n"
            "  Moved() : x_(torch::zeros({2})) {}\n"
            "  void upload() { x_ = x_.cuda(); }\n"
            "private:\n"
            "  torch::Tensor x_;\n"
            "};\n");
  ASSERT_TRUE(P.AST);
  auto Classes = match(cxxRecordDecl(isDefinition(),
                                     hasAnyName("Trainer", "Moved"))
                           .bind("c"),
                       P.AST->getASTContext());
  ASSERT_EQ(Classes.size(), 2u);
  for (const auto &M : Classes) {
    const auto *RD = M.getNodeAs<CXXRecordDecl>("c");
    const ClassState &S = P.Model->classState(*RD);
    if (RD->getName() == "Trainer") {
      std::map<std::string, ValueFacts> ByName;
      for (const auto &[Member, Facts] : S.Members)
        if (const FieldDecl *Field = Member.memberField())
          ByName[Field->getNameAsString()] = Facts;
      EXPECT_TRUE(ByName["model_"].Device.Value.isCUDA());
      EXPECT_TRUE(ByName["device_"].Device.Value.isCUDA());
      EXPECT_EQ(ByName.count("buffer_"), 0u); // never set: unknown
    } else {
      // upload() moves x_ in a way the constructor does not: its device is
      // unknown (what both agree on, no graph, stays).
      for (const auto &[Member, Facts] : S.Members)
        EXPECT_FALSE(Facts.Device.Value.isKnown());
    }
  }
}

TEST(SummaryJson, RoundTrip) {
  Program P("torch::Tensor f(Net &model, const torch::Tensor &x,\n"
            "                torch::Device device) {\n"
            "  auto y = model->forward(x);\n"
            "  model->to(device);\n"
            "  return torch::zeros({2});\n"
            "}\n");
  const FunctionDecl *F = P.function("f");
  ASSERT_TRUE(F);
  const FunctionSummary *S = P.Model->summary(*F);
  ASSERT_TRUE(S);
  llvm::json::Object Functions;
  Functions[usrOf(*F)] =
      FactWriter(P.AST->getASTContext().getSourceManager(), F).summary(*S);
  llvm::json::Object Document{{"version", SummaryFormatVersion},
                              {"functions", std::move(Functions)}};
  std::string Text = llvm::formatv("{0}", llvm::json::Value(std::move(Document)));
  auto Parsed = ExternalSummaries::parse(Text);
  ASSERT_TRUE(bool(Parsed)) << llvm::toString(Parsed.takeError());
  std::optional<FunctionSummary> Back = (*Parsed)->lookup(*F, *P.Model);
  ASSERT_TRUE(Back);
  EXPECT_TRUE(Back->returned().Device.Value.isCPU());
  EXPECT_EQ(Back->returned().Pin.Value, Pinning::Pageable);
  ASSERT_EQ(Back->Effects.size(), S->Effects.size());
  ASSERT_EQ(Back->Effects.size(), 1u);
  EXPECT_EQ(Back->Effects[0].Where, S->Effects[0].Where);
  EXPECT_EQ(holderName(Back->Effects[0].Exit.Device.Value), "device");
  ASSERT_EQ(Back->Obligations.size(), S->Obligations.size());
  for (size_t I = 0; I < S->Obligations.size(); ++I) {
    EXPECT_EQ(Back->Obligations[I].Kind, S->Obligations[I].Kind);
    EXPECT_EQ(Back->Obligations[I].At, S->Obligations[I].At);
  }
  // The same place, read back through the file's name.
  EXPECT_EQ(Back->returned().Device.Origin, S->returned().Device.Origin);

  // Another version is refused, with the reason.
  auto Old = ExternalSummaries::parse("{\"version\": 0}");
  ASSERT_FALSE(bool(Old));
  EXPECT_NE(llvm::toString(Old.takeError()).find("version"), std::string::npos);
}

// Two programs of one database that each define the same function: the
// summaries of an identical definition are kept, different ones dropped.
TEST(SummaryJson, ConflictingDefinitionsAreUnknown) {
  Program Pageable(
      "torch::Tensor load_batch() { return torch::zeros({2}); }\n");
  Program Pinned(
      "torch::Tensor load_batch() { return torch::zeros({2}).pin_memory(); }\n");
  const FunctionDecl *A = Pageable.function("load_batch");
  const FunctionDecl *B = Pinned.function("load_batch");
  ASSERT_TRUE(A && B);
  ASSERT_TRUE(Pageable.Model->summary(*A) && Pinned.Model->summary(*B));
  ASSERT_EQ(usrOf(*A), usrOf(*B));
  auto Export = [](Program &P, const FunctionDecl &F) {
    llvm::json::Object Functions;
    Functions[usrOf(F)] =
        FactWriter(P.AST->getASTContext().getSourceManager(), &F)
            .summary(*P.Model->summary(F));
    return llvm::json::Object{{"version", SummaryFormatVersion},
                              {"functions", std::move(Functions)}};
  };
  ExternalSummaries Same, Different;
  ASSERT_FALSE(bool(Same.addExport(Export(Pageable, *A))));
  ASSERT_FALSE(bool(Same.addExport(Export(Pageable, *A))));
  ASSERT_FALSE(bool(Different.addExport(Export(Pageable, *A))));
  ASSERT_FALSE(bool(Different.addExport(Export(Pinned, *B))));
  Same.finishEntries();
  Different.finishEntries();
  EXPECT_TRUE(Same.contains(usrOf(*A)));
  EXPECT_FALSE(Different.contains(usrOf(*A)));
}

} // namespace
