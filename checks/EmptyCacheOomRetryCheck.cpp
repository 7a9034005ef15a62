//===--- EmptyCacheOomRetryCheck.cpp - torch-tidy -------------------------===//

#include "EmptyCacheOomRetryCheck.h"
#include "model/OomRetry.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "api/TorchMatchers.h"
#include "support/UserCodeParents.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

EmptyCacheOomRetryCheck::EmptyCacheOomRetryCheck(StringRef Name,
                                                 ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context),
      ExtraEmptyCacheFunctions(Options.get("ExtraEmptyCacheFunctions", "")),
      OutOfMemoryMessages(
          Options.get("OutOfMemoryMessages", "out of memory;OutOfMemory")) {
  for (StringRef Message : utils::options::parseStringList(OutOfMemoryMessages))
    if (!Message.empty())
      LoweredMessages.push_back(Message.lower());
}

void EmptyCacheOomRetryCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraEmptyCacheFunctions", ExtraEmptyCacheFunctions);
  Options.store(Opts, "OutOfMemoryMessages", OutOfMemoryMessages);
}

void EmptyCacheOomRetryCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  std::vector<StringRef> Names(emptyCacheFunctionNames().begin(),
                               emptyCacheFunctionNames().end());
  for (StringRef Extra :
       utils::options::parseStringList(ExtraEmptyCacheFunctions))
    Names.push_back(Extra);
  Finder->addMatcher(callExpr(callee(functionDecl(hasAnyName(Names))),
                              unless(isInUserTemplateInstantiation()),
                              unless(isExpansionInSystemHeader()))
                         .bind("call"),
                     this);
}

bool EmptyCacheOomRetryCheck::testsForOutOfMemory(const Stmt &Body,
                                                  ASTContext &Ctx) const {
  for (const auto &Match :
       match(findAll(stringLiteral().bind("s")), Body, Ctx)) {
    const auto *Literal = Match.getNodeAs<StringLiteral>("s");
    if (!Literal->isOrdinary())
      continue;
    std::string Text = Literal->getString().lower();
    if (llvm::any_of(LoweredMessages, [&](const std::string &Message) {
          return StringRef(Text).contains(Message);
        }))
      return true;
  }
  return false;
}

void EmptyCacheOomRetryCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *EmptyCache = Result.Nodes.getNodeAs<CallExpr>("call");
  ASTContext &Ctx = *Result.Context;
  const CXXCatchStmt *Catch = enclosingHandler(*EmptyCache, Ctx);
  if (!Catch || !Catch->getExceptionDecl())
    return; // `catch (...)` says nothing about out-of-memory.
  QualType Caught = Catch->getCaughtType().getNonReferenceType();
  const CXXRecordDecl *Record = Caught->getAsCXXRecordDecl();
  bool OutOfMemoryType = isOrDerivesFrom(Record, "c10::OutOfMemoryError");
  if (!OutOfMemoryType) {
    // Generic handlers count only when they test for out-of-memory.
    std::string Name = Record ? Record->getQualifiedNameAsString() : "";
    if ((Name != "c10::Error" && Name != "std::exception") ||
        !testsForOutOfMemory(*Catch->getHandlerBlock(), Ctx))
      return;
  }
  std::optional<OomRetry> Retry = findSameSizeRetry(*Catch, *EmptyCache, Ctx);
  if (!Retry)
    return;

  diag(EmptyCache->getBeginLoc(),
       "'emptyCache()' before retrying after an out-of-memory error does not "
       "help: the caching allocator already frees its cached blocks before it "
       "raises OOM; retry with a smaller batch and gradient accumulation, or "
       "use activation checkpointing");
  diag(Catch->getCatchLoc(),
       OutOfMemoryType ? "the out-of-memory handler"
                       : "the handler that tests for an out-of-memory error",
       DiagnosticIDs::Note);
  if (Retry->Call)
    diag(Retry->Call->getBeginLoc(),
         "the same call is retried here with unchanged arguments",
         DiagnosticIDs::Note);
  else
    diag(Retry->Loop->getBeginLoc(),
         "this loop runs the try block again with unchanged inputs",
         DiagnosticIDs::Note);
}

} // namespace clang::tidy::torch
