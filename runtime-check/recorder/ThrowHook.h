// The c10::Error throw-site recorder and crash-time trace writing.
#pragma once

#include <string>
#include <typeinfo>

namespace ttrt {

// True when an exception message says two tensors are on different devices.
bool isDeviceMismatchMessage(const std::string &msg);

// True for a mangled type name of c10::Error or one of its subclasses.
bool isC10ErrorTypeName(const char *mangled);

// Records a throw event for `obj` (called from the __cxa_throw interposer).
void recordThrow(void *obj, std::type_info *tinfo);

// std::set_terminate and fatal-signal handlers that write the trace before
// the process dies. Idempotent.
void installCrashHandlers();

} // namespace ttrt
