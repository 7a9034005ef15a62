//===--- StdLibrary.h - torch-tidy ------------------------------*- C++ -*-===//
//
// The standard library types that carry tensors: containers, iterators,
// pairs and tuples, std::function.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_API_STDLIBRARY_H
#define TORCH_TIDY_API_STDLIBRARY_H

#include "clang/AST/DeclCXX.h"
#include "clang/AST/Expr.h"
#include "clang/AST/ExprCXX.h"
#include "llvm/ADT/StringRef.h"

namespace clang::tidy::torch {

/// Whether \p RD is `std::<Name>` (an instantiation of it, any inline
/// namespace).
bool isStdClass(const CXXRecordDecl *RD, llvm::StringRef Name);

/// The record of a standard container (vector, deque, array, list, map,
/// unordered_map, ...) that \p T names, through references; null otherwise.
const CXXRecordDecl *containerRecord(QualType T);
/// A container that may hold tensors among the arguments of a tensor
/// operation: any but one of numbers (`{4, 4}` for a size); null otherwise.
const CXXRecordDecl *operandContainerRecord(QualType T);
/// `std::optional<T>` or `std::variant<T...>`: a container of at most one
/// element (`*o`, `o.value()`, `o->`, `std::get<T>(v)` name it).
bool isOptional(QualType T);
/// `std::unique_ptr<T>` or `std::shared_ptr<T>` (not of a module, which is
/// a module handle): `*p` and `p->` name the one object it owns.
bool isOwningPointer(QualType T);
/// The type an owning pointer owns.
QualType ownedType(QualType OwningPointer);
/// A map: `m[k]` names the mapped value of an element.
bool isMapContainer(const CXXRecordDecl *RD);
/// The `second` field of a map's value_type, which `m[k]` returns; null
/// when \p MapType is no map.
const FieldDecl *mappedField(QualType MapType);
/// The record a container's elements are (its value_type), or null.
const CXXRecordDecl *containerValueRecord(QualType ContainerType);
/// `std::pair` or `std::tuple`.
bool isTupleLike(QualType T);

/// The container an iterator variable's initialiser walks: `c.begin()`,
/// `c.cbegin()`, `c.rbegin()`, `c.find(k)`, `std::begin(c)`,
/// `m.try_emplace(k, v).first` and the other inserts'; null otherwise.
const Expr *iteratedContainer(const Expr &Init);

/// Methods that add one element to a container (push_back, emplace_back,
/// push_front, insert, emplace, push).
bool isContainerInsert(llvm::StringRef Method);
/// Methods that empty a container or drop its elements.
bool isContainerReset(llvm::StringRef Method);

/// `std::function<...>`.
bool isStdFunction(QualType T);
/// Text: std::string, std::string_view, a char pointer or array.
bool isStringType(QualType T);
/// The argument of `std::move(x)` or `std::forward<T>(x)` (parentheses and
/// implicit casts around the call ignored); null for anything else.
const Expr *movedOrForwarded(const Expr *E);
/// A value that holds code: a `std::function`, a function pointer or
/// reference, a pointer to a member function, a lambda's closure, the
/// result of `std::bind`.
bool isCallableType(QualType T);
/// A callable, or an object with one as a field: a registry's entry
/// (`std::pair<const std::string, Hook>`, `struct Hook { name; fn; }`).
bool holdsCallable(QualType T);
/// `std::swap(a, b)`.
bool isStdSwap(const CallExpr &Call);
/// `std::bind(f, args...)`: the call that binds \p Call's arguments; null
/// otherwise.
bool isStdBind(const CallExpr &Call);
/// N for `std::placeholders::_N`; 0 for anything else.
unsigned placeholderIndex(const Expr &E);
/// A library function that keeps a callable argument instead of running
/// it: a container insert, std::function's constructor and assignment.
bool storesCallableArgument(const FunctionDecl &FD);
/// The member function whose `this` the lambda with call operator \p Op
/// captures (through enclosing lambdas); null in a free function.
const CXXMethodDecl *enclosingMethodOfLambda(const CXXMethodDecl &Op);
/// How a standard function runs the callables it is handed, there and
/// then: once (std::visit, std::invoke, std::apply), or any number of times
/// (an algorithm: std::for_each, std::transform, ...); None: not known to.
enum class CallableRuns { None, Once, Repeatedly };
CallableRuns runsCallableArguments(const FunctionDecl &FD);

/// For a start of a thread (a `std::thread` or `std::jthread` constructor,
/// `std::async`): its arguments from the one that names the function the
/// thread runs, the function's arguments after it; empty for anything else.
llvm::ArrayRef<const Expr *> threadStartArguments(const Expr &Start);

/// `os << x` into a `std::basic_ostream` (std::cout, a file, a string
/// stream).
bool isOstreamInsertion(const CXXOperatorCallExpr &Op);

/// Whether \p Var starts as a copy of another object: copy- or
/// move-constructed from one (a range-for's element, `auto h = v[i];`).
bool copiesAnotherObject(const VarDecl &Var);

/// `std::make_unique` or `std::make_shared`: builds the object of an owner.
bool isOwnerFactory(const FunctionDecl *FD);
/// The class that `o.emplace(args)` builds in place in a std::optional `o`
/// (a guard engaged on some paths); null for any other call.
const CXXRecordDecl *optionalEmplacedClass(const CallExpr &Call);
/// std::accumulate / std::reduce: a fold of a range's elements and an
/// initial value.
bool isStdAccumulate(const FunctionDecl &FD);

/// `std::dynamic_pointer_cast` and its siblings: the same object, another
/// pointer type.
bool isSmartPointerCast(const FunctionDecl &FD);
/// The pointer that \p E casts with a smart-pointer cast, or null.
const Expr *smartPointerCastSource(const Expr *E);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_API_STDLIBRARY_H
