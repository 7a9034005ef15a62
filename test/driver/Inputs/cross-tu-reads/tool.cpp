// Another tool with a main of its own. Its helper, which no main calls, is
// settled here (a main this TU defines is its program's main), and the
// inline halve() of report.h that it calls is its own copy: the audit does
// not analyse it again.
#include "report.h"

torch::Tensor unused_helper(const torch::Tensor &t) { return halve(t) * 2; }

int main() { return halve(torch::ones({2})).numel() > 0 ? 0 : 1; }
