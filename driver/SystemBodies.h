//===--- SystemBodies.h - torch-tidy driver ---------------------*- C++ -*-===//
//
// Most of a LibTorch TU's parse goes to the bodies of the inline and template
// functions of <torch/torch.h> and the standard library, and no check reads
// them: the checks walk user code only. The driver (never the plugin, whose
// frontend is clang-tidy's) parses with FrontendOptions::SkipFunctionBodies
// and lets clang skip a body only when skippableSystemBody() says so.
// docs/driver.md ("What is skipped") says why the findings cannot change.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_SYSTEMBODIES_H
#define TORCH_TIDY_DRIVER_SYSTEMBODIES_H

#include "clang/AST/ASTConsumer.h"
#include <memory>

namespace clang {
class CompilerInvocation;
class Decl;
} // namespace clang

namespace torchtidy {

/// Whether the body of \p D may be skipped: D is a function declared in a
/// system header, and no check can read its body through a call from user
/// code. Kept, besides user code:
///  - function templates with a forwarding-reference parameter (`T&&`):
///    clang's ExprMutationAnalyzer follows a variable into them;
///  - constructors of classes that may derive from torch::nn::Module, and
///    the members of torch::nn::ModuleHolder, which instantiate them: the
///    tensor model reads module constructors for a `to()`.
/// Sema itself never skips constexpr functions or deduced return types.
bool skippableSystemBody(const clang::Decl &D);

/// \p Inner, whose shouldSkipFunctionBody() is narrowed to
/// skippableSystemBody(); every other callback is forwarded unchanged.
std::unique_ptr<clang::ASTConsumer>
skipSystemBodies(std::unique_ptr<clang::ASTConsumer> Inner);

/// Turns body skipping on for \p Invocation (the consumer decides which).
void enableBodySkipping(clang::CompilerInvocation &Invocation);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_SYSTEMBODIES_H
