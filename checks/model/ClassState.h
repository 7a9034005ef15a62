//===--- ClassState.h - torch-tidy ------------------------------*- C++ -*-===//
//
// What a class's members hold when one of its member functions starts: what
// every constructor establishes (its init list, its body, the members'
// default initialisers), for the members that no other member function
// assigns in a different way and that no code outside the class writes.
//
// A member that every constructor leaves default-constructed (an undefined
// tensor, an empty holder) and that a member function sets (`init()`,
// `setup()`) holds what that function sets: the code uses it after.
//
// A trainer that keeps `device_(torch::kCUDA)`, calls `model_->to(device_)`
// in its constructor and trains in `fit_epoch()` gives `fit_epoch()` a model
// and a device on CUDA at entry.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_CLASSSTATE_H
#define TORCH_TIDY_MODEL_CLASSSTATE_H

#include "State.h"
#include "clang/AST/DeclCXX.h"
#include "llvm/ADT/DenseMap.h"

namespace clang::tidy::torch {

class ProgramModel;

struct ClassState {
  /// The facts of each member (and part of one: a container's elements, a
  /// struct's fields) at entry to a member function other than a
  /// constructor, as locations under `*this`; what is not listed is unknown.
  llvm::DenseMap<Location, ValueFacts> Members;
  /// Computed while a constructor's caller was under analysis: its values
  /// are unknown for now, and the state is computed again later.
  bool Provisional = false;
};

/// \p Class and the classes it derives from (non-virtually, with a visible
/// definition), derived first: the classes whose members and member
/// functions make up an object of \p Class.
llvm::SmallVector<const CXXRecordDecl *, 2>
classWithBases(const CXXRecordDecl &Class);

/// The fields of an object of \p Class, its bases' included.
llvm::SmallVector<const FieldDecl *, 8> fieldsWithBases(const CXXRecordDecl &Class);

/// Computes \p Class's state with the analyses and summaries of \p Program.
ClassState computeClassState(const CXXRecordDecl &Class, ProgramModel &Program);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_CLASSSTATE_H
