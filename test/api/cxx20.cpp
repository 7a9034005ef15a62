// RUN: %check_torch_tidy -std=c++20 %S/../integration/cxx20.cpp torch-device-mismatch,torch-tensor-to-discarded,torch-empty-cache-in-loop,torch-loss-accumulation-graph %t

// C++20 user code (concepts, ranges, designated initialisers, templated
// lambdas, <=>, std::span) on the mock headers: the test of the real headers,
// test/integration/cxx20.cpp, which runs only where 2.x headers are present.
